"""A faithful, local stand-in for GKE's ClusterManager API (node pools and operations).

`ClusterManagerEmulator` serves it over real gRPC on 127.0.0.1, validates requests the
way GKE does, runs long-running operations through PENDING, RUNNING and DONE, injects
faults and enforces accelerator quota from its config, and records every call.
"""

from dws_operator.emulator.config import (
    DEFAULT_CLUSTER,
    ClusterConfig,
    EmulatorConfig,
    MethodFaults,
    load_config,
)
from dws_operator.emulator.server import (
    SERVICE_NAME,
    CallRecord,
    ClusterManagerEmulator,
    EmulatorThread,
)

__all__ = [
    "DEFAULT_CLUSTER",
    "SERVICE_NAME",
    "CallRecord",
    "ClusterConfig",
    "ClusterManagerEmulator",
    "EmulatorConfig",
    "EmulatorThread",
    "MethodFaults",
    "load_config",
]
