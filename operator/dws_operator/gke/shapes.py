"""A node pool's shape: what makes two pools interchangeable for a request.

Two pools of one shape differ only in name and in which request holds them, so a pool
at zero nodes whose request is done can serve the next request of that shape (an
update of two settings) instead of a new pool being created (GKE's slowest node pool
operation, and one of the cluster's few operation slots for tens of seconds).

The shape is a digest of the pool as rendered for the plan, without its name, its
labels and its autoscaling ceiling (zero while idle, the plan's again once taken; a
TPU slice pool's stays the slice's). It
is written on the pool as a label when the pool is created: comparing what the
operator rendered, not what GKE returns, keeps fields GKE fills in (zones, versions)
out of it.
"""

from __future__ import annotations

import hashlib

from google.cloud import container_v1

from dws_operator.gke.labels import LABEL_PREFIX

SHAPE_LABEL = f"{LABEL_PREFIX}shape"
#: Hex digits of the digest kept: 64 bits, collisions among a cluster's shapes are
#: not a concern, and the label stays short.
_DIGITS = 16


def shape_of(pool: container_v1.NodePool) -> str:
    """The shape digest of a rendered pool (name, labels and ceiling left out)."""
    probe = container_v1.NodePool()
    container_v1.NodePool.copy_from(probe, pool)
    probe.name = ""
    probe.config.labels.clear()
    probe.config.resource_labels.clear()
    scaling = probe.autoscaling
    scaling.min_node_count = scaling.max_node_count = 0
    scaling.total_min_node_count = scaling.total_max_node_count = 0
    probe.initial_node_count = 0
    encoded = container_v1.NodePool.pb(probe).SerializeToString(deterministic=True)
    return hashlib.sha256(encoded).hexdigest()[:_DIGITS]


def shape_label(pool: container_v1.NodePool) -> str | None:
    """The shape a pool was created with; None for pools made without one."""
    return pool.config.resource_labels.get(SHAPE_LABEL)
