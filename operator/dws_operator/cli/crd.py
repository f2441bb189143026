"""`dws-operator crd`: print the TrainingRequest (or TrainingPolicy) CRD generated from
the API models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dws_operator.crd import render_crd_yaml, render_policy_crd_yaml


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "crd",
        help="print the TrainingRequest CustomResourceDefinition",
        description="Print the TrainingRequest CRD (schema, printer columns, CEL rules) as YAML.",
    )
    parser.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")
    parser.add_argument(
        "--policy", action="store_true", help="the TrainingPolicy CRD instead (guardrails)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    text = render_policy_crd_yaml() if args.policy else render_crd_yaml()
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0
