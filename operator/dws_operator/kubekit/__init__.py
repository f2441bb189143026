"""A small, generic Kubernetes kit the operator is built on, free of its domain: the
login (kubeconfig, exec plugins, in-cluster) and the JSON transport, typed API errors,
the work queue of keys, the fence every mutation asks first, leader election on a Lease,
and an Event poster that never blocks. Nothing here knows TrainingRequests, GKE or
Kueue; `dws_operator.controller` builds the operator from it (its import contract is
tested in tests/unit/test_layers.py)."""
