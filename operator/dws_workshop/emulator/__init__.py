"""A faithful, local stand-in for GKE's ClusterManager API (node pools and operations).

`ClusterManagerEmulator` serves it over real gRPC on 127.0.0.1, validates requests the
way GKE does, runs long-running operations through PENDING, RUNNING and DONE, injects
faults and enforces accelerator quota, GKE's concurrent-operations quota and its
per-project request rate from its config, and records every call. Beside
it, over HTTP, `ComputeEmulator` serves the Compute resource policies (workload
policies) node pools name, with the same faults, operations and call log.
"""

from dws_workshop.emulator.compute import ComputeCall, ComputeEmulator
from dws_workshop.emulator.config import (
    COMPUTE_METHODS,
    DEFAULT_CLUSTER,
    GKE_OPERATION_SECONDS,
    ClusterConfig,
    EmulatorConfig,
    MethodFaults,
    load_config,
)
from dws_workshop.emulator.server import (
    SERVICE_NAME,
    CallRecord,
    ClusterManagerEmulator,
    EmulatorThread,
)

__all__ = [
    "COMPUTE_METHODS",
    "DEFAULT_CLUSTER",
    "GKE_OPERATION_SECONDS",
    "SERVICE_NAME",
    "CallRecord",
    "ClusterConfig",
    "ClusterManagerEmulator",
    "ComputeCall",
    "ComputeEmulator",
    "EmulatorConfig",
    "EmulatorThread",
    "MethodFaults",
    "load_config",
]
