"""The `dws-operator` command: one subcommand per module under dws_operator.cli."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from dws_operator import __version__
from dws_operator.cli import crd, dev, devcluster, emulator, plan, run


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit status 2, like every other input error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="dws-operator",
        description="Run ML training on GKE's Dynamic Workload Scheduler from one TrainingRequest.",
    )
    parser.add_argument("--version", action="version", version=f"dws-operator {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    plan.register(commands)
    crd.register(commands)
    devcluster.register(commands)
    emulator.register(commands)
    run.register(commands)
    dev.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): not an error worth a traceback.
        sys.stderr.close()
        return 0
    return result
