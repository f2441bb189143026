"""Which Kueue releases dws-operator works with, told apart by the API versions they serve.

Kueue served only `kueue.x-k8s.io/v1beta1` up to v0.14. v0.15.0 added `v1beta2` and serves
both (v1beta1 deprecated); v0.16 stores v1beta2; v0.20 stops serving v1beta1 (Kueue's
release notes for v0.15.0, kubernetes-sigs/kueue #7626, #8018, #13957, #14558). The pinned
Kueue (hack/versions.env) serves both.

The operator itself writes no Kueue objects, only the queue label and ProvisioningRequest
annotations on its Jobs and JobSets; the Kueue objects that go with it (the Helm chart's
`kueue.createObjects`, the sandbox's, `kueue_objects`) are v1beta2, and it is tested only
against a Kueue that serves v1beta2. So it needs Kueue v0.15.0 or later, and says so at start
rather than queueing Jobs on a Kueue it was never run with.
"""

from __future__ import annotations

from collections.abc import Collection

from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP

#: The first Kueue release serving KUEUE_API_VERSION.
MINIMUM_KUEUE_RELEASE = "v0.15.0"


def unsupported_kueue(served: Collection[str]) -> str | None:
    """Why a cluster whose `kueue.x-k8s.io` group serves `served` cannot be used; None when
    it can, or when Kueue is not installed (nothing served)."""
    if not served or KUEUE_API_VERSION in served:
        return None
    listed = ", ".join(sorted(served))
    return (
        f"this cluster's Kueue serves {KUEUE_GROUP} {listed} but not {KUEUE_API_VERSION}: it "
        f"is older than Kueue {MINIMUM_KUEUE_RELEASE}. dws-operator needs Kueue "
        f"{MINIMUM_KUEUE_RELEASE} or later; upgrade Kueue, or run without it (DWS_KUEUE=disabled)"
    )
