"""Chaos run: "no orphan, no duplicate, nothing lost", one JSON line.

    venv=$(bash hack/python-env.sh); export PYTHONPATH=$PWD/operator
    $venv/bin/python hack/chaos.py                                  # 50 requests, 200 kills
    $venv/bin/python hack/chaos.py --requests 8 --kills 8 --seed 7  # about what CI runs

Starts its own devcluster (API server, etcd, kwok), Kueue, the GKE emulator and its
autoscaler, and two `dws-operator run` replicas with leader election; drives requests of
every kind (TPU single- and multi-host, GPU, Spot; cleanup ScaleToZero and Delete; one
kind over its GPU quota) while it SIGKILLs the operators, injects GKE faults and restarts
the API server once; then deletes every request. See dws_workshop.sandbox.chaos for what
is injected and how the verdict is reached. Exit status 1 when the verdict is not clean.
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

from dws_workshop.sandbox.chaos import ChaosOptions, ChaosRun, clean
from dws_workshop.sandbox.operator_env import operator_python


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-apiserver-restart", action="store_true", help="leave the API server alone"
    )
    parser.add_argument(
        "--operator-python",
        help="interpreter to run the operator with (default: hack/python-env.sh operator's)",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the run's logs")
    return parser


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    args = _parser().parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    options = ChaosOptions(
        requests=args.requests,
        kills=args.kills,
        replicas=args.replicas,
        seed=args.seed,
        restart_apiserver=not args.no_apiserver_restart,
        operator_python=args.operator_python or operator_python(),
    )
    workdir = Path(tempfile.mkdtemp(prefix="dws-chaos-"))

    def say(text: str) -> None:
        print(f"chaos: {text}", file=sys.stderr, flush=True)

    try:
        figures = ChaosRun(options, workdir, say).run()
    except KeyboardInterrupt:
        say(f"interrupted; logs in {workdir}")
        return 130
    except Exception:
        say(f"failed; logs in {workdir}")
        raise
    print(json.dumps(figures), flush=True)
    verdict = clean(figures)
    say("clean" if verdict else f"NOT clean; logs in {workdir}")
    if verdict and not args.keep_logs:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
