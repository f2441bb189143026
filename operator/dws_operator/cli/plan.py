"""`dws-operator plan`: show the slice, node pool and pod placement a request resolves to.

Here the command's flags, the request they or a manifest describe, and what is printed
in which format; the text for people is `cli.plan_render`'s."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dws_operator.api import TrainingRequestSpec
from dws_operator.catalog import GpuDriver, GpuType, ProvisioningMode, TpuVersion
from dws_operator.cli.objects import register_flags, run_objects
from dws_operator.cli.plan_render import (
    render_advice,
    render_booking,
    render_estimates,
    render_step,
    render_table,
)
from dws_operator.errors import InvalidSpec, SpecError, from_validation_error
from dws_operator.estimate import History
from dws_operator.naming import step_pool_base
from dws_operator.planning import SlicePlan, plan_slice
from dws_operator.reconcile import read_spec

#: Which flag sets which field, so errors can name what the user typed.
FLAGS = {
    "spec.accelerator.tpu.version": "--tpu",
    "spec.accelerator.tpu.topology": "--topology",
    "spec.accelerator.tpu.machineType": "--machine-type",
    "spec.accelerator.tpu.slices": "--slices",
    "spec.accelerator.gpu.slices": "--slices",
    "spec.accelerator.gpu.type": "--gpu",
    "spec.accelerator.gpu.nodes": "--nodes",
    "spec.accelerator.gpu.machineType": "--machine-type",
    "spec.accelerator.gpu.count": "--count",
    "spec.accelerator.gpu.driver": "--gpu-driver",
    "spec.provisioning.mode": "--mode",
    "spec.provisioning.reservation": "--reservation",
    "spec.provisioning.maxWaitDuration": "--max-wait-duration",
    "spec.provisioning.maxRunDuration": "--max-run-duration",
    "spec.maxRestarts": "--max-restarts",
    "spec.nodePool.name": "--node-pool",
    "spec.provisioning.fallback": "--fallback",
}
#: `plan` needs no pod template; a placeholder satisfies the spec's required field.
_PLACEHOLDER_TEMPLATE = {"spec": {"containers": [{"name": "plan", "image": "plan"}]}}


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "plan",
        help="resolve an accelerator request to machine type, nodes and node pool settings",
        description=(
            "Resolve a TPU topology or GPU request to its machine type, node count, pod "
            "placement and the node pool settings of the provisioning mode. Either describe "
            "the request with flags or give a TrainingRequest manifest with -f."
        ),
    )
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--tpu", metavar="VERSION", help=f"TPU version: {_choices(TpuVersion)}")
    kind.add_argument("--gpu", metavar="TYPE", help=f"GPU type: {_choices(GpuType)}")
    kind.add_argument("-f", "--filename", type=Path, help="a TrainingRequest manifest (YAML)")
    parser.add_argument("--topology", help="TPU topology, e.g. 4x4 or 2x2x4")
    parser.add_argument("--nodes", type=int, help="GPU VMs")
    parser.add_argument("--count", type=int, help="GPUs per VM")
    parser.add_argument("--machine-type", help="machine type (default: derived)")
    parser.add_argument(
        "--gpu-driver", help=f"GPU driver GKE installs: {_choices(GpuDriver)} (default Default)"
    )
    parser.add_argument(
        "--slices", type=int, help="identical multi-host TPU slices (Multislice, default 1)"
    )
    parser.add_argument(
        "--mode",
        default=ProvisioningMode.FLEX_START.value,
        help=f"provisioning mode: {_choices(ProvisioningMode)} (default FlexStart)",
    )
    parser.add_argument(
        "--reservation",
        help="reservation (mode Reservation): NAME or projects/P/reservations/NAME, "
        "optionally /reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK]",
    )
    parser.add_argument("--zone", action="append", dest="zones", help="node zone (repeatable)")
    parser.add_argument("--max-wait-duration", help="how long to wait for capacity (default 24h)")
    parser.add_argument("--max-run-duration", help="longest run time (default 168h)")
    parser.add_argument("--max-restarts", type=int, help="restarts after preemption")
    parser.add_argument(
        "--fallback",
        action="append",
        metavar="MODE[,zone=Z]...[,wait=D][,reservation=R]",
        help="a further step of the capacity ladder, tried when the one before it gets no "
        "capacity in time (repeatable, in order), e.g. --fallback FlexStart,zone=us-east5-b,"
        "wait=30m --fallback Spot",
    )
    parser.add_argument("--node-pool", help="node pool name (adds its node selector)")
    parser.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table", help="output format"
    )
    parser.add_argument(
        "--estimate",
        metavar="NAMESPACE/NAME",
        help="how long each ladder step's capacity took earlier requests, from the operator's "
        "capacity history ConfigMap in the cluster of the current kubeconfig context (e.g. "
        "dws-system/dws-operator-capacity-history)",
    )
    register_flags(parser)
    parser.set_defaults(run=run)


def _choices(values: Any) -> str:
    return ", ".join(v.value for v in values)


def _spec_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    if args.tpu is not None:
        if args.gpu_driver is not None:
            raise SpecError(FLAGS["spec.accelerator.gpu.driver"], "a GPU setting; not with --tpu")
        if args.topology is None:
            raise SpecError(FLAGS["spec.accelerator.tpu.topology"], "required with --tpu")
        accelerator = {
            "tpu": _present(
                version=args.tpu,
                topology=args.topology,
                machineType=args.machine_type,
                slices=args.slices,
            )
        }
    else:
        if args.nodes is None:
            raise SpecError(FLAGS["spec.accelerator.gpu.nodes"], "required with --gpu")
        if args.slices is not None:
            raise SpecError(
                f"{FLAGS['spec.accelerator.gpu.slices']} (spec.accelerator.gpu.slices)",
                "slices are TPU slices; a GPU request sets --nodes",
            )
        accelerator = {
            "gpu": _present(
                type=args.gpu,
                nodes=args.nodes,
                machineType=args.machine_type,
                count=args.count,
                driver=args.gpu_driver,
            )
        }
    provisioning = _present(
        mode=args.mode,
        reservation=args.reservation,
        zones=args.zones,
        maxWaitDuration=args.max_wait_duration,
        maxRunDuration=args.max_run_duration,
        fallback=[_fallback_step(text) for text in args.fallback] if args.fallback else None,
    )
    return _present(
        accelerator=accelerator,
        provisioning=provisioning,
        maxRestarts=args.max_restarts,
        nodePool=_present(name=args.node_pool),
        template=_PLACEHOLDER_TEMPLATE,
    )


_STEP_KEYS = {"zone": "zones", "wait": "maxWaitDuration", "reservation": "reservation"}


def _fallback_step(text: str) -> dict[str, Any]:
    """`FlexStart,zone=us-east5-b,wait=30m` -> a fallback step of the spec."""
    mode, *settings = [part.strip() for part in text.split(",")]
    step: dict[str, Any] = {"mode": mode}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or key not in _STEP_KEYS or not value:
            raise SpecError(
                f"--fallback {text}",
                f"{setting!r} is not one of zone=ZONE, wait=DURATION, reservation=NAME",
            )
        if key == "zone":
            step.setdefault("zones", []).append(value)
        else:
            step[_STEP_KEYS[key]] = value
    return step


def _present(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _load_manifest(path: Path) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
    """The spec of a TrainingRequest manifest, its node pool name if one can be known,
    and its metadata."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        reason = str(error).replace("\n", " ")
        raise SpecError(str(path), f"cannot read a TrainingRequest: {reason}") from None
    if not isinstance(document, dict) or not isinstance(document.get("spec"), dict):
        raise SpecError(f"{path}: spec", "a TrainingRequest manifest needs a spec mapping")
    metadata = document.get("metadata") or {}
    name, uid = metadata.get("name"), metadata.get("uid")
    pool = (document["spec"].get("nodePool") or {}).get("name")
    if pool is None and name and uid:
        pool = read_spec(name, uid, document["spec"]).base_pool
    return document["spec"], pool, metadata if isinstance(metadata, dict) else {}


def resolve(args: argparse.Namespace) -> SlicePlan:
    """The plan of the request's first (or only) step."""
    return resolve_ladder(args)[0]


def _request(args: argparse.Namespace) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
    """The request's spec as written, its node pool name if known, and its metadata."""
    if args.filename is not None:
        return _load_manifest(args.filename)
    return _spec_from_flags(args), args.node_pool, {}


def resolve_ladder(args: argparse.Namespace) -> list[SlicePlan]:
    """The plan of every step of the request's capacity ladder, in order."""
    raw, pool, _ = _request(args)
    try:
        spec = TrainingRequestSpec.model_validate(raw)
    except ValidationError as error:
        raise from_validation_error(error) from None
    first = plan_slice(spec, pool_name=pool)  # every step's rules checked here
    return [first] + [
        plan_slice(
            spec.at_step(step), pool_name=step_pool_base(pool, step) if pool is not None else None
        )
        for step in range(1, spec.ladder_steps)
    ]


def _flagged(error: SpecError, from_flags: bool) -> str:
    field = error.field
    if field.startswith("spec.provisioning.fallback["):
        field = "spec.provisioning.fallback"  # the n-th --fallback
    flag = FLAGS.get(field) if from_flags else None
    return f"{flag} ({error})" if flag else str(error)


def run(args: argparse.Namespace) -> int:
    try:
        ladder = resolve_ladder(args)
    except InvalidSpec as invalid:
        print(
            f"dws-operator plan: {_flagged(invalid.first, args.filename is None)}", file=sys.stderr
        )
        return 2
    except SpecError as error:
        print(f"dws-operator plan: {error}", file=sys.stderr)
        return 2
    if args.objects:
        # Checked above with the flags' names; the objects come from the same request.
        raw, _, metadata = _request(args)
        return run_objects(args, raw, metadata)
    plan = ladder[0]
    document = plan.model_dump(mode="json", by_alias=True, exclude_none=True)
    if len(ladder) > 1:
        document["ladder"] = [_step_document(index, step) for index, step in enumerate(ladder)]
    if args.output == "json":
        print(json.dumps(document, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(document, sort_keys=False), end="")
    else:
        print(render_table(plan))
        spec = TrainingRequestSpec.model_validate(_request(args)[0])
        booking = render_booking(spec, plan)
        if booking is not None:
            print()
            print(booking)
        windows = render_advice(spec, plan, args.project) if args.project else None
        if windows is not None:
            print(windows)
        if args.estimate:
            print()
            print(render_estimates(spec, ladder, read_history(args.estimate)))
        for index, step in enumerate(ladder[1:], start=1):
            print()
            print(render_step(index, len(ladder), step))
    return 0


def _step_document(index: int, plan: SlicePlan) -> dict[str, Any]:
    return {
        "step": index + 1,
        "maxWaitSeconds": plan.max_wait_seconds,
        "nodePool": plan.node_pool.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def read_history(where: str) -> History:
    """The capacity history ConfigMap `namespace/name`, through the current kubeconfig
    context (the Kubernetes client loads only here)."""
    from kubernetes import client, config  # noqa: PLC0415

    namespace, _, name = where.partition("/")
    if not namespace or not name:
        raise SpecError("--estimate", f"{where!r}: expected NAMESPACE/NAME")
    # KUBECONFIG as it is now (the client reads it once, when first imported).
    config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
    try:
        found = client.CoreV1Api().read_namespaced_config_map(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return History()
        raise
    return History.from_data(found.data)
