"""A CEL rule of the CRD (`x-kubernetes-validations`) and the helpers that write CEL.

Every group of rules (`dws_operator.crd.cel`) is built from these, so a literal is
quoted, and a missing required field guarded, the same way everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from dws_operator.durations import DURATION_PATTERN


@dataclass(frozen=True)
class Rule:
    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None
    #: Required fields the rule reads. The API server runs CEL even when a required
    #: field is missing; the guard keeps that case to the one clear "Required value"
    #: error instead of adding a "no such key" evaluation error.
    needs: tuple[str, ...] = ()

    def expression(self) -> str:
        if not self.needs:
            return self.rule
        present = " && ".join(_has_chain(path) for path in self.needs)
        return f"!({present}) || ({self.rule})"

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.expression(), "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


def _has_chain(path: str) -> str:
    """`provisioning.mode` -> `has(self.provisioning) && has(self.provisioning.mode)`."""
    parts = path.split(".")
    return " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))


def lit(value: str) -> str:
    """A CEL string literal (CEL accepts JSON's double-quoted escapes)."""
    return json.dumps(value)


def lits(values: Iterable[str | int]) -> str:
    return "[" + ", ".join(lit(v) if isinstance(v, str) else str(v) for v in values) + "]"


def duration_bounds(field: str, low_exclusive: str, high: str) -> str:
    value = f"self.{field}"
    parses = f"size({value}) >= 2 && {value}.matches({lit(DURATION_PATTERN)})"
    return (
        f"!({parses}) || (duration({value}) > duration({lit(low_exclusive)}) && "
        f"duration({value}) <= duration({lit(high)}))"
    )
