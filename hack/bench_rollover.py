"""Long runs' rollovers, measured: one JSON line of figures.

    venv=$(bash hack/python-env.sh); export PYTHONPATH=$PWD/operator
    $venv/bin/python hack/bench_rollover.py                 # 10 runs of 2.5 windows
    $venv/bin/python hack/bench_rollover.py --runs 30 --capacity-seconds 600

Many flex-start runs of several segments at once on the sandbox (devcluster, GKE
emulator, its autoscaler and the operator on the emulator's clock); per rollover the gap
(old segment stopped -> new segment running), the new capacity's provisioning time and
how far ahead of the window's end it was asked for, all in simulated seconds (see
dws_workshop.sandbox.rollover_bench). Progress goes to stderr, the JSON line to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from dws_workshop.sandbox.rollover_bench import RolloverOptions, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10, help="long runs at once")
    parser.add_argument("--windows", type=float, default=2.5, help="work per run, in windows")
    parser.add_argument(
        "--capacity-seconds",
        type=float,
        default=300.0,
        help="simulated seconds a flex-start VM takes to come",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after (wall s)")
    args = parser.parse_args()
    options = RolloverOptions(
        runs=args.runs,
        windows=args.windows,
        capacity_seconds=args.capacity_seconds,
        timeout=args.timeout,
    )
    with tempfile.TemporaryDirectory(prefix="dws-rollover-") as workdir:
        figures = run(options, Path(workdir), lambda line: print(line, file=sys.stderr))
    print(json.dumps(figures))
    return 0 if not figures["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
