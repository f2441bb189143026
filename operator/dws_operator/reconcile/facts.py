"""A TrainingRequest's spec read once, at the edge: typed facts that everything after
reads, never the stored object.

The facts hold the validated spec (or why it is invalid) and, valid or not, what the
operator needs to look after what it made for the request: its slice count, its
ladder's steps as written, its pools' base name. A spec the operator cannot plan still
has its pools scaled down and deleted, so those readings never fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from dws_operator.api import TrainingRequestSpec
from dws_operator.errors import InvalidSpec, from_validation_error
from dws_operator.guardrails import Size, request_size
from dws_operator.multislice import JOBSET_KIND
from dws_operator.naming import default_node_pool_name
from dws_operator.validation import most_segments, spec_errors


@dataclass(frozen=True)
class StepWords:
    """A ladder step's provisioning as written (the labels of a request's metrics,
    whether or not its spec is valid)."""

    mode: str
    zones: tuple[str, ...] = ()


@dataclass(frozen=True)
class RequestFacts:
    """What a TrainingRequest's spec says."""

    #: The validated spec; None when it is invalid (`invalid` says why).
    spec: TrainingRequestSpec | None
    invalid: InvalidSpec | None
    #: `spec.accelerator.tpu.slices` as stored; 1 when unreadable.
    slices: int
    #: Every step of the capacity ladder as written (one without fallback).
    steps: tuple[StepWords, ...]
    #: The base name of the request's pools on its first step: the one it names, else
    #: derived from its name and uid.
    base_pool: str
    #: The spec names its pool (`spec.nodePool.name`).
    named_pool: bool
    #: The pool is one the user made (`spec.nodePool.existing`): never the operator's.
    existing: bool
    #: The future reservation a Calendar step books, and the reservation it delivers:
    #: from the request's name and uid alone (not a pool name the spec gives, which
    #: another request may give too).
    booking_name: str = ""
    #: Chips and nodes of every slice by the chip math; None when the spec cannot be
    #: planned.
    size: Size | None = None
    #: The most segments a long run (`spec.run.duration`) may take: 1 for one window.
    segments: int = 1

    @property
    def ladder_steps(self) -> int:
        return len(self.steps)

    @property
    def workload_kind(self) -> str:
        return JOBSET_KIND if self.slices > 1 else "Job"

    def step_words(self, step: int | None) -> StepWords:
        """Ladder step `step` (1-based, as `status.step`; the first when unset or past
        the ladder)."""
        index = (step or 1) - 1
        return self.steps[index] if 0 <= index < len(self.steps) else self.steps[0]


def read_spec(name: str, uid: str, spec: Mapping[str, Any]) -> RequestFacts:
    """The facts of a request named `name` with `uid` whose stored spec is `spec`."""
    validated: TrainingRequestSpec | None = None
    invalid: InvalidSpec | None = None
    try:
        validated = TrainingRequestSpec.model_validate(spec)
        errors = spec_errors(validated) if validated.ladder_steps > 1 else []
        if errors:
            raise InvalidSpec(errors)
    except ValidationError as error:
        validated, invalid = None, from_validation_error(error)
    except InvalidSpec as error:
        validated, invalid = None, error
    slices = slices_of(spec)
    steps = tuple(_words(step_provisioning(spec, step)) for step in range(1, steps_of(spec) + 1))
    pool = spec.get("nodePool")
    pool = pool if isinstance(pool, dict) else {}
    named = pool.get("name")
    named = named if isinstance(named, str) and named else None
    long_run = _has_run_duration(spec)
    base = named or default_node_pool_name(name, uid, slices, len(steps) > 1, long_run)
    return RequestFacts(
        spec=validated,
        invalid=invalid,
        slices=slices,
        steps=steps,
        base_pool=base,
        named_pool=named is not None,
        existing=bool(pool.get("existing", False)),
        booking_name=default_node_pool_name(name, uid),
        size=request_size(validated) if validated is not None else None,
        segments=most_segments(validated) if validated is not None else 1,
    )


def _has_run_duration(spec: Mapping[str, Any]) -> bool:
    """The stored spec sets `run.duration`: its pool names keep room for segment
    suffixes (read raw: a name must not change with the spec's validity)."""
    run = spec.get("run")
    return isinstance(run, dict) and run.get("duration") is not None


def steps_of(spec: Mapping[str, Any]) -> int:
    """Steps of the stored spec's capacity ladder (1 without fallback; admission bounds it)."""
    provisioning = spec.get("provisioning")
    fallback = provisioning.get("fallback") if isinstance(provisioning, dict) else None
    return 1 + (len(fallback) if isinstance(fallback, list) else 0)


def step_provisioning(spec: Mapping[str, Any], step: int | None) -> Mapping[str, Any]:
    """The stored spec's provisioning of ladder step `step` (1-based, as `status.step`)
    as written: a fallback step's own fields (unset ones are the first step's), or the
    first step's (no ladder, no such step, or unreadable)."""
    provisioning = spec.get("provisioning")
    first: Mapping[str, Any] = provisioning if isinstance(provisioning, dict) else {}
    fallback = first.get("fallback")
    index = (step or 1) - 2
    if isinstance(fallback, list) and 0 <= index < len(fallback):
        chosen = fallback[index]
        return chosen if isinstance(chosen, dict) else first
    return first


def slices_of(spec: Mapping[str, Any]) -> int:
    """`spec.accelerator.tpu.slices` as stored (admission bounds it); 1 when unreadable,
    so a spec the operator cannot plan still has its one pool looked after."""
    accelerator = spec.get("accelerator")
    tpu = accelerator.get("tpu") if isinstance(accelerator, dict) else None
    slices = tpu.get("slices", 1) if isinstance(tpu, dict) else 1
    # Any stored count (admission bounded it when it was written): a later, lower bound
    # must not rename the pools of requests that already exist.
    return slices if isinstance(slices, int) and not isinstance(slices, bool) and slices >= 1 else 1


def _words(provisioning: Mapping[str, Any]) -> StepWords:
    zones = provisioning.get("zones")
    return StepWords(
        mode=str(provisioning.get("mode") or ""),
        zones=tuple(str(z) for z in zones) if isinstance(zones, list) else (),
    )
