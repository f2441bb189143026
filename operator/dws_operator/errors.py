"""Errors in a TrainingRequest, each naming the field at fault and what it accepts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from dws_operator.api.spec import FORMAT_HINTS


class SpecError(ValueError):
    """A TrainingRequest field that GKE (or the API) would not accept."""

    def __init__(self, field: str, message: str, allowed: Iterable[str] = ()) -> None:
        self.field = field
        self.message = message
        self.allowed = tuple(allowed)
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.field}: {self.message}"
        return f"{text}; allowed: {', '.join(self.allowed)}" if self.allowed else text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpecError) and (self.field, self.message, self.allowed) == (
            other.field,
            other.message,
            other.allowed,
        )

    def __hash__(self) -> int:
        return hash((self.field, self.message, self.allowed))


class InvalidSpec(ValueError):
    """Every error found in one TrainingRequest spec, first one first."""

    def __init__(self, errors: Sequence[SpecError]) -> None:
        if not errors:
            raise ValueError("InvalidSpec needs at least one error")
        self.errors = tuple(errors)
        super().__init__("; ".join(str(e) for e in self.errors))

    @property
    def first(self) -> SpecError:
        return self.errors[0]


def field_path(prefix: str, loc: Sequence[int | str]) -> str:
    """`("accelerator", "tpu", "machine_type")` -> `spec.accelerator.tpu.machineType`."""
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{to_camel(part)}"
    return path


def from_validation_error(error: ValidationError, prefix: str = "spec") -> InvalidSpec:
    """Turn pydantic's report into SpecErrors with API field paths."""
    found: list[SpecError] = []
    for item in error.errors(include_url=False):
        # Union members and model validators add their own names to the location.
        loc = [p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        allowed: tuple[str, ...] = ()
        message = item["msg"].removeprefix("Value error, ")
        ctx = item.get("ctx") or {}
        if item["type"] == "enum" and "expected" in ctx:
            expected = str(ctx["expected"]).replace(" or ", ", ")
            allowed = tuple(p.strip(" '") for p in expected.split(","))
            message = f"{item['input']!r} is not supported"
        elif item["type"] == "string_pattern_mismatch":
            named = [to_camel(p) for p in loc if isinstance(p, str)]
            hint = FORMAT_HINTS.get(named[-1]) if named else None
            message = f"{item['input']!r} is malformed" + (f"; expected {hint}" if hint else "")
        found.append(SpecError(field_path(prefix, loc), message, allowed))
    return InvalidSpec(found)
