"""The workshop: what builds, runs and tests the operator locally, and is not the operator.

- `devcluster`: a local control plane (etcd, kube-apiserver, controllers, kwok and its
  stages, Kueue, JobSet) built from pinned Go modules;
- `emulator`: GKE's ClusterManager API (gRPC) and Compute's resource policies (REST),
  as GKE answers them;
- `simulator`: the cluster around them: autoscaler, ProvisioningRequests, kwok nodes,
  capacity scenarios;
- `sandbox`: `dws-operator dev`, and the testbed of the benchmark and the chaos run;
- `cli`: the `dev`, `devcluster` and `emulator` subcommands.

It lives beside the operator in `operator/` and runs from a checkout (`hack/`, the
tests); the operator's distribution and image hold none of it, and the operator
imports none of it.
"""
