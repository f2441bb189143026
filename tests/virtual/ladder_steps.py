"""Steps the ladder and stuck-request scenarios of the virtual tier share: a request's
attempts, the pool a ladder step named, its Events' messages."""

from __future__ import annotations

from typing import Any

from dws_operator import rfc3339
from tests.virtual.harness import UNTIL_SECONDS, VirtualOperator


def attempts(op: VirtualOperator) -> list[dict[str, Any]]:
    """The request's attempts, one per ladder step begun."""
    found: list[dict[str, Any]] = op.status().get("attempts") or []
    return found


def lasted(attempt: dict[str, Any]) -> float:
    """Seconds from an attempt's start to its end."""
    started, ended = (rfc3339.parse(attempt[k]) for k in ("startedAt", "endedAt"))
    return (ended - started).total_seconds()


async def step_pool(op: VirtualOperator, step: int, every: float = 1.0) -> str:
    """The pool the request's attempt on `step` (1-based) named, once it has begun
    (looked for every `every` virtual seconds)."""

    def named() -> str | None:
        return next((a.get("nodePool") for a in attempts(op) if a["step"] == step), None)

    return str(await op.until(named, f"step {step}'s attempt", step=every))


def event_messages(op: VirtualOperator, reason: str) -> list[str]:
    """The messages of the request's Events with `reason`, oldest first."""
    found = [
        e
        for e in op.objects("events")
        if (e.get("involvedObject") or {}).get("name") == op.name and e["reason"] == reason
    ]
    found.sort(key=lambda e: str(e.get("firstTimestamp") or e["metadata"].get("creationTimestamp")))
    return [str(e.get("message") or "") for e in found]


async def job_named(
    op: VirtualOperator, name: str, step: float = 1.0, within: float = UNTIL_SECONDS
) -> dict[str, Any]:
    """The request's Job `name`, once the operator has made it (looked for every `step`
    virtual seconds: a longer step is fewer turns of the loop over a long wait)."""

    def found() -> dict[str, Any] | None:
        return next((j for j in op.jobs() if j["metadata"]["name"] == name), None)

    job: dict[str, Any] = await op.until(found, f"the Job {name}", within, step)
    return job
