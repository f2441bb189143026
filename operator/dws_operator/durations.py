"""Durations as Kubernetes users write them ("24h", "90m", "1h30m", "7200s").

The accepted grammar is a subset of Go's `time.ParseDuration` (hours, minutes,
seconds, in that order), so the API server's CEL `duration()` and this parser
agree on every string the CRD pattern lets through. Each part is capped at six
digits so no accepted string overflows CEL's 64-bit nanoseconds (max ~1,016,943h).
"""

from __future__ import annotations

import re
from datetime import timedelta

DURATION_PATTERN = r"^([0-9]{1,6}h)?([0-9]{1,6}m)?([0-9]{1,6}(\.[0-9]{1,6})?s)?$"
_DURATION_RE = re.compile(DURATION_PATTERN)


def parse_duration(text: str) -> timedelta:
    """Parse "1h30m"-style text; raise ValueError naming the accepted form."""
    match = _DURATION_RE.match(text)
    if not text or match is None:
        raise ValueError(
            f"{text!r} is not a duration; use hours, minutes and seconds like 24h, 90m, 1h30m, 0s"
        )
    hours, minutes, seconds = (match.group(i) for i in (1, 2, 3))
    return timedelta(
        hours=int(hours[:-1]) if hours else 0,
        minutes=int(minutes[:-1]) if minutes else 0,
        seconds=float(seconds[:-1]) if seconds else 0.0,
    )


def format_duration(value: timedelta) -> str:
    """The shortest "XhYmZs" spelling of a whole-second duration ("168h", "1h30m", "0s")."""
    total = int(value.total_seconds())
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n)
    return text or "0s"
