"""The `dws-operator` command: one subcommand per module under dws_operator.cli."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from dws_operator import __version__

#: Subcommands, each a module with `register(subparsers)`. Only the one asked for is
#: imported: `dws-operator run` must not load the workshop or its libraries (memory and
#: start-up time of the operator). The workshop's run from a checkout only.
COMMANDS = {
    "plan": "dws_operator.cli.plan",
    "crd": "dws_operator.cli.crd",
    "devcluster": "dws_workshop.cli.devcluster",
    "emulator": "dws_workshop.cli.emulator",
    "run": "dws_operator.cli.run",
    "dev": "dws_workshop.cli.dev",
}

WORKSHOP = "dws_workshop."

#: What `dws-operator dev` says where the workshop or its libraries are not there (an
#: installed operator, or its image).
NO_WORKSHOP = (
    "{command} is a workshop command and cannot load here ({error}); the operator's "
    "distribution does not carry the workshop: run it from a checkout (bash hack/run.sh "
    "{command})"
)


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit status 2, like every other input error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser, or only `only`'s."""
    parser = OneLineParser(
        prog="dws-operator",
        description="Run ML training on GKE's Dynamic Workload Scheduler from one TrainingRequest.",
    )
    parser.add_argument("--version", action="version", version=f"dws-operator {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(COMMANDS[name])
        except ModuleNotFoundError as error:
            if not COMMANDS[name].startswith(WORKSHOP):
                raise  # the operator's own: a broken installation, shown whole
            if only is not None:
                parser.exit(2, f"dws-operator: {NO_WORKSHOP.format(command=name, error=error)}\n")
            continue  # `dws-operator --help` lists what is there
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    chosen = next((w for w in words if not w.startswith("-")), None)
    args = build_parser(chosen if chosen in COMMANDS else None).parse_args(words)
    try:
        result: int = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): not an error worth a traceback.
        sys.stderr.close()
        return 0
    return result
