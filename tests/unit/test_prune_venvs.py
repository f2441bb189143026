"""hack/prune-venvs.sh: of one kind of cached venv, the ones used last are kept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def venv(cache: Path, name: str, used_at: int | None) -> None:
    made = cache / name
    (made / "bin").mkdir(parents=True)
    if used_at is not None:
        (made / ".used").touch()
        os.utime(made / ".used", (used_at, used_at))


def prune(cache: Path, suffix: str, keep: int) -> None:
    subprocess.run(
        ["bash", str(ROOT / "hack/prune-venvs.sh"), str(cache), suffix, str(keep)],
        check=True,
        capture_output=True,
    )


def left(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir())


def test_the_venvs_used_last_are_kept_of_each_kind(tmp_path: Path) -> None:
    day = 86_400
    venv(tmp_path, "py311-aaaaaaaaaaaa", 1 * day)
    venv(tmp_path, "py311-bbbbbbbbbbbb", 4 * day)
    venv(tmp_path, "py311-cccccccccccc", None)  # made before uses were stamped
    venv(tmp_path, "py311-dddddddddddd", 3 * day)
    venv(tmp_path, "py311-eeeeeeeeeeee", 2 * day)
    venv(tmp_path, "py311-aaaaaaaaaaaa-operator", 1 * day)
    venv(tmp_path, "py311-bbbbbbbbbbbb-operator", 5 * day)
    venv(tmp_path, "lower-bounds", None)

    prune(tmp_path, "", 3)
    assert left(tmp_path) == [
        "lower-bounds",
        "py311-aaaaaaaaaaaa-operator",
        "py311-bbbbbbbbbbbb",
        "py311-bbbbbbbbbbbb-operator",
        "py311-dddddddddddd",
        "py311-eeeeeeeeeeee",
    ]

    prune(tmp_path, "-operator", 1)
    assert left(tmp_path) == [
        "lower-bounds",
        "py311-bbbbbbbbbbbb",
        "py311-bbbbbbbbbbbb-operator",
        "py311-dddddddddddd",
        "py311-eeeeeeeeeeee",
    ]


def test_nothing_goes_while_there_are_no_more_than_kept(tmp_path: Path) -> None:
    venv(tmp_path, "py311-aaaaaaaaaaaa", None)
    venv(tmp_path, "py311-bbbbbbbbbbbb", None)
    prune(tmp_path, "", 3)
    assert left(tmp_path) == [
        "py311-aaaaaaaaaaaa",
        "py311-bbbbbbbbbbbb",
    ]
