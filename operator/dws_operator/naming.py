"""Deterministic names for what the operator creates in GKE."""

from __future__ import annotations

import hashlib
import re

MAX_NODE_POOL_NAME = 40
_UID_DIGITS = 10


def default_node_pool_name(request_name: str, uid: str) -> str:
    """`dws-<name prefix>-<uid digest>`: readable in the console, unique per object.

    The same (name, uid) always gives the same pool, so an operator restarted after
    creating a pool finds it again instead of creating a second one. GKE wants
    lowercase letters, digits and hyphens, a leading letter and at most 40 characters.
    """
    digest = hashlib.sha256(uid.encode()).hexdigest()[:_UID_DIGITS]
    room = MAX_NODE_POOL_NAME - len("dws-") - 1 - _UID_DIGITS
    stem = re.sub(r"[^a-z0-9-]+", "-", request_name.lower())[:room].strip("-")
    stem = re.sub(r"-{2,}", "-", stem)
    return f"dws-{stem}-{digest}" if stem else f"dws-{digest}"
