"""The cluster around the emulated GKE API: an autoscaler that turns pending pods and
ProvisioningRequests into kwok Nodes of the right node pool, with capacity that arrives,
stocks out or is preempted as a scenario says."""
