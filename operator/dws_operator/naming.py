"""Deterministic names for what the operator creates in GKE."""

from __future__ import annotations

import hashlib
import re

from dws_operator.catalog import parse_topology

MAX_NODE_POOL_NAME = 40
_UID_DIGITS = 10
#: Room a multi-slice request keeps for its slice suffixes (`-s0` .. `-s63`).
SLICE_SUFFIX_ROOM = len("-s63")
#: The longest pool name a multi-slice request may give (its slices add the suffix).
MAX_SLICED_POOL_NAME = MAX_NODE_POOL_NAME - SLICE_SUFFIX_ROOM
#: Room a capacity ladder keeps for its steps' suffixes (`-f1` .. `-f7`).
STEP_SUFFIX_ROOM = len("-f7")
#: Room a long run (`spec.run.duration`) keeps for its segments' suffixes (`-r2` ..
#: `-r32`).
SEGMENT_SUFFIX_ROOM = len("-r32")


def max_pool_name(slices: int = 1, ladder: bool = False, segments: bool = False) -> int:
    """The longest base pool name a request may give or be given: room for the slice
    suffixes of several slices, the step suffixes of a capacity ladder and the segment
    suffixes of a long run."""
    room = (
        (SLICE_SUFFIX_ROOM if slices > 1 else 0)
        + (STEP_SUFFIX_ROOM if ladder else 0)
        + (SEGMENT_SUFFIX_ROOM if segments else 0)
    )
    return MAX_NODE_POOL_NAME - room


def default_node_pool_name(
    request_name: str, uid: str, slices: int = 1, ladder: bool = False, segments: bool = False
) -> str:
    """`dws-<name prefix>-<uid digest>`: readable in the console, unique per object.

    The same (name, uid) always gives the same pool, so an operator restarted after
    creating a pool finds it again instead of creating a second one. GKE wants
    lowercase letters, digits and hyphens, a leading letter and at most 40 characters;
    a multi-slice request's name (and a ladder's) is shorter so that every suffix fits.
    """
    digest = hashlib.sha256(uid.encode()).hexdigest()[:_UID_DIGITS]
    limit = max_pool_name(slices, ladder, segments)
    room = limit - len("dws-") - 1 - _UID_DIGITS
    stem = re.sub(r"[^a-z0-9-]+", "-", request_name.lower())[:room].strip("-")
    stem = re.sub(r"-{2,}", "-", stem)
    return f"dws-{stem}-{digest}" if stem else f"dws-{digest}"


def slice_pool_names(base: str, slices: int) -> tuple[str, ...]:
    """One pool per slice: a single slice keeps `base` itself (so pools created before
    multi-slice existed are still found); slice i of several is `<base>-s<i>`."""
    if slices == 1:
        return (base,)
    return tuple(f"{base}-s{index}" for index in range(slices))


def step_pool_base(base: str, step: int) -> str:
    """The base pool name of a capacity ladder's step `step` (0-based): the first step
    keeps `base` (a request without fallback is named as it always was); step i of the
    rest is `<base>-f<i>`. Each step has pools of its own: GKE cannot turn a pool's
    flex-start, Spot or queued provisioning on or off."""
    return base if step == 0 else f"{base}-f{step}"


def segment_pool_base(base: str, segment: int) -> str:
    """The base pool name of a long run's segment `segment` (1-based) on a step whose
    base is `base`: the first keeps it; segment k of the rest is `<base>-r<k>`. Each
    segment has pools of its own, so the next one's can be made while the last one's
    VMs still run its workload, and no old node takes the new segment's pods."""
    return base if segment <= 1 else f"{base}-r{segment}"


#: Every workload policy the operator makes is named this and its topology.
POLICY_NAME_PREFIX = "dws-high-throughput-"


def workload_policy_name(topology: str) -> str:
    """The one policy name for `topology` (`2x2x2` -> `dws-high-throughput-2x2x2`)."""
    if parse_topology(topology) is None:
        raise ValueError(f"{topology!r} is not a TPU topology such as 2x2x2")
    return f"{POLICY_NAME_PREFIX}{topology}"
