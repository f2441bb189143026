"""The one zone of a TPU slice's node pool. Pure.

A TPU slice lives in one zone: xpk creates every slice pool with `--node-locations=ZONE`,
Cluster Toolkit's gke-node-pool module requires per-zone limits for TPU flex-start pools
and allows compact placement only in a single zone, and GKE validates a multi-host slice
against the pool's per-zone maximum ("Maximum node count 0 is not a valid size of TPU pod
slice with topology 2x2x2" when only a total maximum is given). So a multi-host TPU pool
gets exactly one zone, taken, in this order, from:

1. the request (its step's `zones`, one at most: admission refuses more);
2. a zonal cluster: its own zone (a pool of a zonal cluster lives in the cluster's zone
   unless told otherwise);
3. a regional cluster, flex-start modes: the first zone of the cluster's region in the
   list GKE documents for the generation (`TpuGeneration.flex_start_zones`); none there
   is a refusal naming the documented zones, since GKE offers no flex-start capacity for
   that TPU elsewhere;
4. a regional cluster, Reservation: a refusal asking for the reservation's zone (a
   specific reservation's VMs are in one zone, which the operator cannot look up
   without Compute rights it does not ask for);
5. a regional cluster, other modes (and generations with no documented flex-start
   list, tpu7x today): the first of the cluster's node locations (sorted): every zone of
   them can host a pool; the request names another to choose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dws_operator.catalog import ProvisioningMode, TpuGeneration
from dws_operator.errors import SpecError

#: `us-east5-a`: a region (`us-east5`) and a one-letter zone suffix.
_ZONE_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
_FLEX_MODES = frozenset({ProvisioningMode.FLEX_START, ProvisioningMode.QUEUED_PROVISIONING})
ZONES_FIELD = "spec.provisioning.zones"


@dataclass(frozen=True)
class ClusterSite:
    """Where the cluster is: its location (a region or a zone) and, for a regional
    cluster, the zones its nodes use (GKE's `Cluster.locations`; may be unknown)."""

    location: str
    node_locations: tuple[str, ...] = ()

    @property
    def zonal(self) -> bool:
        return bool(_ZONE_RE.match(self.location))

    @property
    def region(self) -> str:
        return self.location.rsplit("-", 1)[0] if self.zonal else self.location


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0] if _ZONE_RE.match(zone) else zone


def slice_zone(
    named: tuple[str, ...],
    generation: TpuGeneration,
    mode: ProvisioningMode,
    site: ClusterSite,
    field: str = ZONES_FIELD,
) -> str:
    """The zone of a multi-host slice's pool; SpecError (naming `field`) when none can be
    justified. `named`: the zones the request's step names (admission allows one)."""
    if named:
        return named[0]
    if site.zonal:
        return site.location
    if mode in _FLEX_MODES and generation.flex_start_zones:
        documented = generation.flex_start_zones
        here = [z for z in documented if region_of(z) == site.region]
        if here:
            return here[0]
        raise SpecError(
            field,
            f"GKE documents flex-start capacity for TPU {generation.version} only in "
            f"{', '.join(documented)}; none is in this cluster's region {site.region}: "
            "name a zone",
        )
    if mode == ProvisioningMode.RESERVATION:
        raise SpecError(
            field,
            "a TPU slice on a reservation lives in the reservation's zone: name it (one "
            "zone of this regional cluster's region " + site.region + ")",
        )
    if site.node_locations:
        return sorted(site.node_locations)[0]
    raise SpecError(
        field,
        f"a TPU slice lives in one zone and this regional cluster's ({site.region}) node "
        "locations are not known: name a zone",
    )
