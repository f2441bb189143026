"""RFC 3339 times as Kubernetes and GKE write them, always in UTC with a `Z`.

Kubernetes' `Time` has whole seconds (`metadata.creationTimestamp`, condition times),
its `MicroTime` microseconds (a Lease's `renewTime`); GKE's operation times carry
milliseconds. Every one of them is read by `parse`.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse(text: str) -> datetime:
    """An RFC 3339 time (any precision, `Z` or an offset); ValueError if it is none."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def seconds(moment: datetime) -> str:
    """Kubernetes' `Time`: `2026-11-23T10:00:00Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def milliseconds(moment: datetime) -> str:
    """GKE's operation times: `2026-11-23T10:00:00.123Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def microseconds(moment: datetime) -> str:
    """Kubernetes' `MicroTime`: `2026-11-23T10:00:00.123456Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> datetime:
    return datetime.now(UTC)
