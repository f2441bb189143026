"""Load benchmark of the operator on GKE's terms: one JSON line per scale point.

    venv=$(bash hack/python-env.sh); export PYTHONPATH=$PWD/operator
    $venv/bin/python hack/bench.py                                 # 100, 300, 1000 requests
    $venv/bin/python hack/bench.py --points 20 --steady-seconds 10  # a quick look

Each point starts its own devcluster (kube-apiserver, etcd, kwok), Kueue, the GKE
emulator with GKE's limits (5 concurrent operations per cluster; CreateNodePool 40,
deletes 20, updates 10 simulated seconds, run --clock-factor times faster), the
emulator's autoscaler (no capacity until the completion wave) and `dws-operator run` as
a separate process, and stops all of it afterwards (also on Ctrl-C or an error).

Figures (see dws_workshop.sandbox.benchmark for how each is measured) are in wall
seconds; GKE's operations there last their simulated durations / clock factor, and the
bounds use the same base. Progress goes to stderr, the JSON lines to stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

from dws_workshop.sandbox.benchmark import Point, PointOptions
from dws_workshop.sandbox.operator_env import operator_python
from dws_workshop.sandbox.testbed import GkeLimits


def _points(text: str) -> list[int]:
    points = [int(p) for p in text.split(",") if p.strip()]
    if not points or min(points) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated request counts, each >= 1")
    return points


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--points", type=_points, default=[100, 300, 1000], help="request counts")
    parser.add_argument("--rate", type=float, default=50.0, help="requests created per second")
    parser.add_argument(
        "--clock-factor", type=float, default=10.0, help="simulated seconds per wall second"
    )
    parser.add_argument(
        "--steady-seconds", type=float, default=60.0, help="the steady window of waiting"
    )
    parser.add_argument(
        "--operator-python",
        help="interpreter to run the operator with (default: hack/python-env.sh operator's)",
    )
    parser.add_argument("--quota", type=int, default=5, help="concurrent operations per cluster")
    parser.add_argument("--sim-duration", default="2s", help="how long each pod runs (wall)")
    parser.add_argument(
        "--timeout-factor", type=float, default=4.0, help="give up on a wave after N x its bound"
    )
    parser.add_argument(
        "--pool-idle-seconds",
        type=float,
        default=3600.0,
        help="the operator's DWS_POOL_IDLE_SECONDS (longer than the completion wave)",
    )
    parser.add_argument(
        "--records",
        type=Path,
        help="also write every request's times (JSON lines) to RECORDS-<requests>.jsonl "
        "and every GKE call to RECORDS-<requests>-calls.jsonl",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep each point's logs (operator, cluster)"
    )
    return parser


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM ends the run like Ctrl-C: every context unwinds and stops what it started.
    raise KeyboardInterrupt


def main() -> int:
    args = _parser().parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    # Also when started where SIGINT is ignored (a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    limits = GkeLimits(clock_factor=args.clock_factor, concurrent_operations=args.quota)

    def say(text: str) -> None:
        print(f"bench: {text}", file=sys.stderr, flush=True)

    python = args.operator_python or operator_python()
    say(f"operator runs with {python}")
    for requests in args.points:
        workdir = Path(tempfile.mkdtemp(prefix=f"dws-bench-{requests}-"))
        options = PointOptions(
            requests=requests,
            rate=args.rate,
            steady_seconds=args.steady_seconds,
            limits=limits,
            sim_duration=args.sim_duration,
            timeout_factor=args.timeout_factor,
            pool_idle_seconds=args.pool_idle_seconds,
            operator_python=python,
        )
        say(f"point: {requests} requests")
        try:
            point = Point(options, workdir, say)
            figures = point.run()
        except KeyboardInterrupt:
            say(f"interrupted; logs in {workdir}")
            return 130
        except Exception:
            say(f"point {requests} failed; logs in {workdir}")
            raise
        print(json.dumps(figures), flush=True)
        if args.records is not None:
            path = args.records.with_name(f"{args.records.name}-{requests}.jsonl")
            path.write_text("".join(json.dumps(row) + "\n" for row in point.rows))
            calls = args.records.with_name(f"{args.records.name}-{requests}-calls.jsonl")
            calls.write_text("".join(json.dumps(row) + "\n" for row in point.calls))
            say(f"per-request times in {path}, GKE calls in {calls}")
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
