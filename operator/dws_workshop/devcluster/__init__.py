"""A local Kubernetes control plane built from pinned Go modules, for tests and the sandbox."""

from dws_workshop.devcluster.binaries import MissingBinaries, find_binaries, third_party_crds
from dws_workshop.devcluster.cluster import DevCluster, DevClusterError, DevClusterOptions

__all__ = [
    "DevCluster",
    "DevClusterError",
    "DevClusterOptions",
    "MissingBinaries",
    "find_binaries",
    "third_party_crds",
]
