"""Suite-wide collection order: the slowest directories first.

With several workers (`--dist loadfile --no-loadscope-reorder`, as `hack/test.sh` runs the
suite), files go to whichever worker is free, in collection order. The end-to-end and
scale files take 10 to 90 s each and the unit files well under one, so the slow ones go
first and the quick ones fill the gaps at the end; in the default order the suite ended
with one worker running the last end-to-end files alone for minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent

#: Directories by how long their files take, slowest first; anything else after them.
SLOWEST_FIRST = ("cluster/scale", "cluster/e2e", "cluster", "gke")


def _rank(item: pytest.Item) -> int:
    relative = item.path.relative_to(HERE).as_posix()
    for rank, directory in enumerate(SLOWEST_FIRST):
        if relative.startswith(directory + "/"):
            return rank
    return len(SLOWEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: within a directory, files and tests keep their order.
    items.sort(key=_rank)
