"""GKE versions, and the oldest GKE version each feature the operator uses needs, as data.

GKE names its versions `MAJOR.MINOR.PATCH-gke.BUILD` (`1.33.0-gke.1712000`). They order by
the numbers, the build last, never as text: `1.33.0-gke.1712000` < `1.33.1-gke.100`, and
`1.32.2-gke.900` < `1.32.2-gke.1652000`.

The minimums are GKE's documented ones: flex-start GPUs (concepts/dws), flex-start TPUs
(same page; TPU queued provisioning runs on flex-start nodes too), Ironwood
(concepts/tpu-ironwood, Standard clusters) and Multislice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from dws_operator.catalog.modes import ProvisioningMode
from dws_operator.catalog.tpu import TpuVersion

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?$")


@dataclass(frozen=True, order=True)
class GkeVersion:
    """One GKE version; compares by its numbers (a missing `-gke.N` counts as build 0)."""

    major: int
    minor: int
    patch: int
    build: int = 0
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str) -> GkeVersion:
        match = _VERSION_RE.match(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a GKE version such as 1.33.0-gke.1712000")
        major, minor, patch, build = match.groups()
        return cls(int(major), int(minor), int(patch), int(build or 0), text.strip())

    def __str__(self) -> str:
        return self.text or f"{self.major}.{self.minor}.{self.patch}-gke.{self.build}"


@dataclass(frozen=True)
class VersionGate:
    """A feature the operator may ask GKE for, and the oldest GKE version that has it.

    A request needs the feature when it matches every field that is set: `kind`
    ("tpu"/"gpu"), one of `modes`, the TPU `tpu_version`, and several slices when
    `multi_slice` is true.
    """

    feature: str
    minimum: GkeVersion
    kind: str | None = None
    modes: frozenset[ProvisioningMode] = frozenset()
    tpu_version: TpuVersion | None = None
    multi_slice: bool = False

    def applies(
        self, kind: str, mode: ProvisioningMode, tpu_version: TpuVersion | None, slices: int
    ) -> bool:
        return (
            (self.kind is None or self.kind == kind)
            and (not self.modes or mode in self.modes)
            and (self.tpu_version is None or self.tpu_version == tpu_version)
            and (not self.multi_slice or slices > 1)
        )


_FLEX_START = frozenset({ProvisioningMode.FLEX_START})
_QUEUED = frozenset({ProvisioningMode.QUEUED_PROVISIONING})

VERSION_GATES: tuple[VersionGate, ...] = (
    VersionGate("GPU flex-start", GkeVersion.parse("1.32.2-gke.1652000"), "gpu", _FLEX_START),
    VersionGate(
        "GPU flex-start with queued provisioning",
        GkeVersion.parse("1.32.2-gke.1652000"),
        "gpu",
        _QUEUED,
    ),
    VersionGate("TPU flex-start", GkeVersion.parse("1.33.0-gke.1712000"), "tpu", _FLEX_START),
    # No GKE document gives TPU queued provisioning a minimum of its own (checked
    # 2026-11-27); Cluster Toolkit's TPU queued blueprints pick version_prefix "1.35.",
    # a release-channel choice rather than a floor. So TPU flex-start's minimum holds.
    VersionGate(
        "TPU flex-start with queued provisioning",
        GkeVersion.parse("1.33.0-gke.1712000"),
        "tpu",
        _QUEUED,
    ),
    VersionGate(
        "Ironwood (tpu7x)",
        GkeVersion.parse("1.34.0-gke.2201000"),
        "tpu",
        tpu_version=TpuVersion.TPU7X,
    ),
    VersionGate("Multislice", GkeVersion.parse("1.27.4-gke.900"), "tpu", multi_slice=True),
)


def version_gates(
    kind: str,
    mode: ProvisioningMode,
    tpu_version: TpuVersion | None = None,
    slices: int = 1,
    gates: Iterable[VersionGate] = VERSION_GATES,
) -> tuple[VersionGate, ...]:
    """Every gate a request of this shape must pass, in table order."""
    return tuple(g for g in gates if g.applies(kind, mode, tpu_version, slices))


def unmet_gates(cluster: GkeVersion, gates: Iterable[VersionGate]) -> tuple[VersionGate, ...]:
    """The gates `cluster` is too old for."""
    return tuple(g for g in gates if cluster < g.minimum)
