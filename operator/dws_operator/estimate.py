"""How long capacity takes to come: a history of waits by kind of capacity, and the
estimate it gives. Pure.

A wait is observed each time a request's ladder step (or a single-step request) asks for
capacity: from the ask to every node ready (an event), or to the end of the ask without
it (censored: it timed out, GKE said no, the request moved down its ladder or was
deleted). Censored waits are kept, not dropped: dropping them would leave only the lucky
requests and make the wait look shorter than it is. The estimate is the Kaplan-Meier
survival curve's quantiles (p50, p90): the smallest wait by which that share of asks had
their capacity, counting every wait, ended or not, while it lasted. When too many asks
ended without capacity for the curve to fall that far, the quantile is unknown (None),
which is itself the answer: more than that share did not get capacity within the waits
seen.

Kinds of capacity are keys (`capacity_key`): accelerator, shape, slices, mode and zone,
as ConfigMap keys allow (letters, digits, `-`, `_`, `.`). The history keeps the newest
`MAX_PER_KEY` waits of each key and the `MAX_KEYS` keys seen last, so it fits one
ConfigMap (about 100 KiB at most).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

#: Newest waits kept per key, and keys kept (those with the newest waits).
MAX_PER_KEY = 100
MAX_KEYS = 40
_UNSAFE = re.compile(r"[^-._a-zA-Z0-9]+")


@dataclass(frozen=True)
class Wait:
    """One ask for capacity: how long it lasted, and whether it ended without it."""

    seconds: float
    censored: bool
    #: When it ended.
    at: datetime


@dataclass(frozen=True)
class Estimate:
    """What the history says of one key."""

    key: str
    observations: int
    censored: int
    #: Seconds by which half (nine in ten) of the asks had their capacity; None when
    #: there is no data, or too many ended without capacity to tell.
    p50: float | None
    p90: float | None


def capacity_key(accelerator: str, shape: str, slices: int, mode: str, zone: str) -> str:
    """The kind of capacity a wait is counted under, e.g.
    `tpu-v6e.4x4.x1.FlexStart.us-east5-a`."""
    parts = (accelerator, shape, f"x{slices}", mode, zone)
    return ".".join(_UNSAFE.sub("_", part).strip("._") or "_" for part in parts)


def quantile(waits: Iterable[Wait], share: float) -> float | None:
    """The Kaplan-Meier estimate of the wait by which `share` of asks had capacity; None
    when the waits do not show it (no data, or the curve never falls that far)."""
    ordered = sorted(waits, key=lambda w: (w.seconds, w.censored))
    at_risk = len(ordered)
    surviving = 1.0
    index = 0
    while index < len(ordered):
        time = ordered[index].seconds
        events = 0
        leaving = 0
        # Events at a time come before the censored waits of that time (still at risk).
        while index < len(ordered) and ordered[index].seconds == time:
            events += 0 if ordered[index].censored else 1
            leaving += 1
            index += 1
        if events:
            surviving *= 1.0 - events / at_risk
            if surviving <= 1.0 - share + 1e-12:
                return time
        at_risk -= leaving
    return None


def estimate(key: str, waits: Iterable[Wait]) -> Estimate:
    seen = list(waits)
    return Estimate(
        key=key,
        observations=len(seen),
        censored=sum(1 for w in seen if w.censored),
        p50=quantile(seen, 0.5),
        p90=quantile(seen, 0.9),
    )


@dataclass
class History:
    """Waits by key, newest last, bounded (`MAX_PER_KEY`, `MAX_KEYS`)."""

    waits: dict[str, list[Wait]] = field(default_factory=dict)

    def add(self, key: str, wait: Wait) -> None:
        kept = self.waits.setdefault(key, [])
        kept.append(wait)
        del kept[:-MAX_PER_KEY]
        if len(self.waits) > MAX_KEYS:
            newest = sorted(self.waits, key=lambda k: self.waits[k][-1].at, reverse=True)
            for stale in newest[MAX_KEYS:]:
                del self.waits[stale]

    def estimate(self, key: str) -> Estimate:
        return estimate(key, self.waits.get(key, ()))

    def to_data(self) -> dict[str, str]:
        """As a ConfigMap's `data`: per key, a JSON list of [seconds, censored, ended at
        (epoch seconds)]."""
        return {
            key: json.dumps(
                [[round(w.seconds, 3), int(w.censored), int(w.at.timestamp())] for w in waits],
                separators=(",", ":"),
            )
            for key, waits in sorted(self.waits.items())
        }

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None) -> History:
        """Read back `to_data`'s form; an entry that does not parse is dropped (a hand
        edit must not stop the operator), the rest kept."""
        history = cls()
        for key, text in (data or {}).items():
            try:
                rows = json.loads(text)
                waits = [
                    Wait(float(seconds), bool(censored), datetime.fromtimestamp(int(at), UTC))
                    for seconds, censored, at in rows
                ]
            except (ValueError, TypeError):
                continue
            if waits and _UNSAFE.search(key) is None:
                history.waits[key] = waits[-MAX_PER_KEY:]
        return history
