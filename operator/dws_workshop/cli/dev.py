"""`dws-operator dev`: the whole product in a local sandbox, with one command."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from dws_workshop.devcluster import DevClusterError, MissingBinaries
from dws_workshop.sandbox import Sandbox, SandboxOptions


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "dev",
        help="run the sandbox: control plane, GKE emulator and operator, with a sample",
        description=(
            "Start a local Kubernetes control plane (kwok nodes), the GKE emulator with its "
            "autoscaler and the operator; apply a TrainingRequest (a TPU v6e 4x4 flex-start "
            "sample, or -f FILE) and follow it until its pool is back at zero."
        ),
    )
    parser.add_argument("-f", "--filename", type=Path, help="a TrainingRequest manifest")
    parser.add_argument("--kubeconfig", type=Path, help="where to write the sandbox kubeconfig")
    parser.add_argument("--scenario", type=Path, help="capacity scenario (YAML) for the emulator")
    parser.add_argument(
        "--exit-when-done",
        action="store_true",
        help="stop the sandbox once the request ends (exit 0 if it Succeeded)",
    )
    parser.add_argument(
        "--without-kueue",
        action="store_true",
        help=(
            "run without Kueue and the JobSet controller (no queueing; skips building them "
            "on a first run, about 11 minutes on 2 cores)"
        ),
    )
    parser.set_defaults(run=run)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    options = SandboxOptions(
        manifest=args.filename,
        kubeconfig=args.kubeconfig.resolve() if args.kubeconfig else None,
        scenario=args.scenario,
        exit_when_done=args.exit_when_done,
        kueue=not args.without_kueue,
    )
    try:
        return Sandbox(options).run()
    except KeyboardInterrupt:
        print("\ndws-operator dev: stopped; everything removed", file=sys.stderr)
        return 130
    except (DevClusterError, MissingBinaries, ValueError, OSError) as error:
        print(f"dws-operator dev: {error}", file=sys.stderr)
        return 1
