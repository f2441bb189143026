"""Compute Engine's error answers and root URL, shared by the emulated resources."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from google.protobuf import json_format

from dws_workshop.emulator.config import MethodFaults
from dws_workshop.emulator.ruleids import behaviour

COMPUTE_ROOT = "https://www.googleapis.com/compute/v1"
M = TypeVar("M")


class ComputeApiError(Exception):
    """A Compute call answered with an HTTP error status and Google's JSON error body."""

    def __init__(self, status: int, reason: str, message: str, *, rule: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        #: The RULES.md id of the rule this answer enforces.
        self.rule = rule
        super().__init__(f"{status} {reason}: {message}")

    def body(self) -> dict[str, Any]:
        """`{"error": {code, message, errors: [{message, domain, reason}]}}`, as Compute answers."""
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
            }
        }


def not_found(resource: str) -> ComputeApiError:
    return ComputeApiError(
        404, "notFound", f"The resource '{resource}' was not found", rule="CE-NOT-FOUND"
    )


def already_exists(resource: str) -> ComputeApiError:
    return ComputeApiError(
        409, "alreadyExists", f"The resource '{resource}' already exists", rule="CE-ALREADY-EXISTS"
    )


def not_ready(resource: str) -> ComputeApiError:
    return ComputeApiError(
        400, "resourceNotReady", f"The resource '{resource}' is not ready", rule="CE-NOT-READY"
    )


def in_use(resource: str, user: str) -> ComputeApiError:
    # Compute's wording for any resource another one still references (disks, addresses...).
    return ComputeApiError(
        400,
        "resourceInUseByAnotherResource",
        f"The resource_policy resource '{resource}' is already being used by '{user}'",
        rule="CE-POLICY-IN-USE",
    )


@dataclass
class ComputeRequest:
    """One HTTP request, as a method's handler reads it."""

    params: dict[str, str]
    query: dict[str, str]
    text: str
    faults: MethodFaults
    body: dict[str, Any] | None = field(default=None)


def to_json(message: Any) -> dict[str, Any]:
    """A proto-plus message as Compute writes it: camelCase names, enums by name."""
    return dict(
        type(message).to_dict(
            message,
            use_integers_for_enums=False,
            preserving_proto_field_name=False,
            always_print_fields_with_no_presence=False,
        )
    )


@behaviour("CE-LIST-PAGE-SIZE")
def page_size(value: str) -> int:
    # Compute caps maxResults at 500, which is also its default.
    try:
        size = int(value)
    except ValueError:
        return 500
    return min(max(size, 1), 500)


def parse_body(request: ComputeRequest, kind: type[M]) -> M:
    """The request's JSON body as a `kind` message, or Compute's 400 for a missing or
    unreadable one."""
    if not request.text.strip():
        raise ComputeApiError(
            400, "required", "Required field 'resource' not specified", rule="CE-RESOURCE-REQUIRED"
        )
    try:
        return cast("M", kind.from_json(request.text))  # type: ignore[attr-defined]
    except json_format.ParseError as error:
        raise ComputeApiError(
            400, "invalid", f"Invalid JSON payload received. {error}", rule="CE-INVALID-JSON"
        ) from error


def page_bounds(request: ComputeRequest) -> tuple[int, int]:
    """(first item, page size) of a list call: its `pageToken` and `maxResults`."""
    size = page_size(request.query.get("maxResults", ""))
    token = request.query.get("pageToken") or "0"
    if not token.isdigit():
        raise ComputeApiError(
            400, "invalid", f"Invalid value for field 'pageToken': '{token}'.", rule="CE-PAGE-TOKEN"
        )
    return int(token), size
