"""GKE's per-project API request quota: so many requests per minute, then RESOURCE_EXHAUSTED.

Google counts every request a project makes to container.googleapis.com, reads as
much as changes, and refuses the ones beyond the minute's quota until the minute has
passed. The emulator keeps, per project, the times of the requests it admitted in the
last minute (a sliding window, on the emulator's simulated clock); a request that
finds the window full is refused and not counted, so waiting always helps.

The project counted is the one the request names (`projects/P/...` or `project_id`):
the emulator has no credentials, so the resource's project stands for the caller's
quota project, which it is when one project holds both the operator and the cluster.
"""

from __future__ import annotations

import re
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

from dws_workshop.emulator.status import ApiError

SERVICE = "container.googleapis.com"
#: Seconds of the quota's window: GKE's request quota is counted per minute.
WINDOW_SECONDS = 60.0

_PROJECT_RE = re.compile(r"^projects/([^/]+)/")


def project_number(project: str) -> int:
    """A stable 12-digit project number for a project ID (the emulator has no registry
    of projects; Google's messages name the consumer by number)."""
    return 100_000_000_000 + zlib.crc32(project.encode()) % 900_000_000_000


def rate_limited(project: str) -> ApiError:
    """Google's answer to a request beyond a per-minute request quota.

    The wording is the API front end's, shared by Google's services: e.g. "Quota
    exceeded for quota metric 'Write requests' and limit 'Write requests per minute' of
    service 'cloudkms.googleapis.com' for consumer 'project_number:...'."
    (GoogleCloudPlatform/python-docs-samples#3482), the same for run.googleapis.com
    (googleapis/repo-automation-bots#4469), cloudbuild.googleapis.com (kubernetes/k8s.io
    #1576) and serviceusage.googleapis.com (nccgroup/ScoutSuite#815). The metric and
    limit names GKE's API uses were not found; 'Requests' and 'Requests per minute' are
    ours, in that pattern.
    """
    return ApiError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of "
        f"service '{SERVICE}' for consumer 'project_number:{project_number(project)}'.",
        rule="GKE-API-RATE-LIMIT",
    )


def request_project(request: Any) -> str | None:
    """The project a ClusterManager request names; None if it names none."""
    for field in ("name", "parent"):
        match = _PROJECT_RE.match(str(getattr(request, field, "") or ""))
        if match is not None:
            return match.group(1)
    project = str(getattr(request, "project_id", "") or "")
    return project or None


class ProjectRateLimit:
    """At most `limit` requests per project in any `window` seconds of `clock`."""

    def __init__(
        self, limit: int, clock: Callable[[], float], window: float = WINDOW_SECONDS
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._admitted: dict[str, deque[float]] = {}

    def admit(self, project: str) -> None:
        """Count one request of `project`, or raise RESOURCE_EXHAUSTED (not counted)."""
        now = self._clock()
        times = self._admitted.setdefault(project, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        if len(times) >= self.limit:
            raise rate_limited(project)
        times.append(now)
