"""The operator's start-up check of the Kueue release, against real API servers: the pinned
Kueue's CRDs (v1beta2 served) pass; a Kueue that serves only v1beta1 (older than v0.15,
simulated with one of Kueue's own CRDs cut down to v1beta1) is refused with one clear line."""

from __future__ import annotations

import asyncio
import copy
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dws_operator.controller import KueueMode, OperatorConfig, OperatorThread
from dws_operator.controller.kube import KubeApi, connect
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP
from dws_operator.kueue_versions import MINIMUM_KUEUE_RELEASE, unsupported_kueue
from dws_workshop.devcluster import DevCluster
from dws_workshop.devcluster.binaries import third_party_crds
from dws_workshop.devcluster.crds import (
    apply_crds,
    install_training_request_crd,
    load_crd_files,
)
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, EmulatorThread
from dws_workshop.sandbox.operator_env import metrics_env


def served_versions(devcluster: DevCluster) -> tuple[str, ...]:
    """What the operator's own discovery call finds (as at its start)."""

    async def main() -> tuple[str, ...]:
        api = await connect(str(devcluster.kubeconfig))
        try:
            return await KubeApi(api).served_versions(KUEUE_GROUP)
        finally:
            await api.close()

    return asyncio.run(main())


def old_kueue_crd() -> dict[str, Any]:
    """Kueue's LocalQueue CRD as a Kueue before v0.15 had it: v1beta1 only (served, stored),
    its schema cut to `x-kubernetes-preserve-unknown-fields` (only the versions matter)."""
    [path] = [p for p in third_party_crds("kueue") if p.name.endswith("_localqueues.yaml")]
    [crd] = load_crd_files([path])
    old = copy.deepcopy(crd)
    [v1beta1] = [v for v in old["spec"]["versions"] if v["name"] == "v1beta1"]
    v1beta1.pop("deprecated", None)
    v1beta1.pop("deprecationWarning", None)
    v1beta1.update(served=True, storage=True)
    v1beta1["schema"] = {
        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    }
    old["spec"]["versions"] = [v1beta1]
    return old


def config_for(emulator: ClusterManagerEmulator, kueue: KueueMode) -> OperatorConfig:
    return OperatorConfig(
        project="dws-sandbox",
        location="us-east5",
        cluster="sandbox",
        gke_endpoint=emulator.endpoint,
        compute_endpoint=emulator.compute_endpoint,
        kueue=kueue,
        namespaces=("kueue-versions",),
    )


def operator_env(emulator: ClusterManagerEmulator) -> dict[str, str]:
    return {
        "DWS_GKE_PROJECT": "dws-sandbox",
        "DWS_GKE_LOCATION": "us-east5",
        "DWS_GKE_CLUSTER": "sandbox",
        "DWS_GKE_ENDPOINT": emulator.endpoint,
        "DWS_COMPUTE_ENDPOINT": emulator.compute_endpoint,
        "DWS_KUEUE": "auto",
        "DWS_NAMESPACES": "kueue-versions",
    }


@pytest.fixture
def emulator() -> Iterator[ClusterManagerEmulator]:
    with EmulatorThread(EmulatorConfig(operation_latency_seconds=0.3)) as served:
        yield served


def test_the_pinned_kueue_is_detected_and_accepted(
    devcluster: DevCluster,
    third_party: list[str],
    training_request_crd: str,
    emulator: ClusterManagerEmulator,
) -> None:
    served = served_versions(devcluster)
    assert KUEUE_API_VERSION in served
    assert unsupported_kueue(served) is None
    with OperatorThread(config_for(emulator, KueueMode.REQUIRED), devcluster.kubeconfig):
        pass  # started: __enter__ raises if the start-up handler refused


def test_a_kueue_serving_only_v1beta1_is_refused_at_start(
    emulator: ClusterManagerEmulator,
) -> None:
    expected = (
        f"this cluster's Kueue serves {KUEUE_GROUP} v1beta1 but not {KUEUE_API_VERSION}: it is "
        f"older than Kueue {MINIMUM_KUEUE_RELEASE}. dws-operator needs Kueue "
        f"{MINIMUM_KUEUE_RELEASE} or later; upgrade Kueue, or run without it (DWS_KUEUE=disabled)"
    )
    # A cluster of its own: the shared one serves the pinned Kueue's v1beta2.
    with DevCluster() as cluster:
        api = cluster.api_client()
        try:
            install_training_request_crd(api)
            apply_crds(api, [old_kueue_crd()])
            served = served_versions(cluster)
        finally:
            api.close()
        assert served == ("v1beta1",)
        assert unsupported_kueue(served) == expected
        for mode in (KueueMode.AUTO, KueueMode.REQUIRED):
            started = time.monotonic()
            operator = OperatorThread(config_for(emulator, mode), cluster.kubeconfig)
            with pytest.raises(RuntimeError, match=re.escape(expected)):
                operator.start()
            print(f"\n{mode.value}: refused in {time.monotonic() - started:.1f}s")
        # `dws-operator run` says it in one line and exits 1.
        run = subprocess.run(
            [sys.executable, "-m", "dws_operator", "run", "--kubeconfig", str(cluster.kubeconfig)],
            env={**os.environ, **operator_env(emulator), **metrics_env()},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 1, run.stderr
        assert run.stderr.splitlines()[-1] == f"dws-operator run: {expected}"
        # Without Kueue the operator neither looks nor cares.
        with OperatorThread(config_for(emulator, KueueMode.DISABLED), cluster.kubeconfig):
            pass
