"""The names a reconcile pass's parts share: a request's (namespace/name, in log
lines), every node pool a request may have made, and the pool an action is about."""

from __future__ import annotations

from dws_operator.reconcile import (
    Action,
    CancelPoolOperation,
    CreateNodePool,
    DeleteNodePool,
    RequestView,
    ScaleNodePoolToZero,
    TakeOverNodePool,
    abandoned_pool_names,
    next_pool_names_for,
    pool_names_for,
)


def request_name(request: RequestView) -> str:
    return f"{request.namespace}/{request.name}"


def every_pool_name(request: RequestView) -> tuple[str, ...]:
    """Every pool a request may have made: each slice's of its current step, and those
    of the steps it left (and pools it took over, then left)."""
    return (
        *pool_names_for(request),
        *next_pool_names_for(request),
        *abandoned_pool_names(request),
    )


def pool_of(action: Action) -> str | None:
    """The node pool an action is about, for the log line's `pool` field."""
    pools = CreateNodePool | TakeOverNodePool | ScaleNodePoolToZero | DeleteNodePool
    return action.name if isinstance(action, pools | CancelPoolOperation) else None
