"""A GKE cluster by its resource name, and the names of its node pools and operations."""

from __future__ import annotations

import re
from dataclasses import dataclass

_CLUSTER_RE = re.compile(r"^projects/([^/]+)/locations/([^/]+)/clusters/([^/]+)$")


@dataclass(frozen=True)
class ClusterRef:
    project: str
    location: str
    cluster: str

    @classmethod
    def parse(cls, path: str) -> ClusterRef:
        match = _CLUSTER_RE.match(path)
        if match is None:
            raise ValueError(f"{path!r} is not of the form projects/P/locations/L/clusters/C")
        return cls(*match.groups())

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    def pool(self, name: str) -> str:
        return f"{self.path}/nodePools/{name}"

    def operation(self, name: str) -> str:
        return f"projects/{self.project}/locations/{self.location}/operations/{name}"
