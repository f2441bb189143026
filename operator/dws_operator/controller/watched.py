"""What the operator watches, in one table: kopf's handlers are registered from it, the
periodic relist lists it again, and the tests' virtual tier delivers its events by it."""

from __future__ import annotations

from dataclasses import dataclass

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.controller.kube import LOCAL_QUEUES, POLICIES, WORKLOADS
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP
from dws_operator.multislice import JOBSET_GROUP, JOBSET_NAME_LABEL, JOBSET_PLURAL, JOBSET_VERSION
from dws_operator.workload import REQUEST_LABEL

__all__ = ["KUEUE_KINDS", "WATCHED", "Watched", "watched"]


@dataclass(frozen=True)
class Watched:
    #: The cache's name of the kind (the plural; our Jobs and a JobSet's are both "jobs").
    kind: str
    group: str
    version: str
    plural: str
    #: Only objects carrying this label (any value); None: every object of the kind.
    label: str | None = None

    def selects(self, labels: dict[str, str] | None) -> bool:
        return self.label is None or self.label in (labels or {})


#: Our Jobs, and the Jobs a JobSet controller makes for our JobSets, under the one kind
#: "jobs". Kueue's LocalQueues: a request whose queue does not exist says so, and goes on
#: when it is made. Its Workloads: one Kueue deactivated (it gave up on it) will never
#: run, and its request need not wait for its time to run out.
WATCHED: tuple[Watched, ...] = (
    Watched(PLURAL, GROUP, VERSION, PLURAL),
    Watched("jobs", "batch", "v1", "jobs", REQUEST_LABEL),
    Watched("jobs", "batch", "v1", "jobs", JOBSET_NAME_LABEL),
    Watched(JOBSET_PLURAL, JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL, REQUEST_LABEL),
    Watched(LOCAL_QUEUES, KUEUE_GROUP, KUEUE_API_VERSION, LOCAL_QUEUES),
    Watched(WORKLOADS, KUEUE_GROUP, KUEUE_API_VERSION, WORKLOADS),
    Watched(POLICIES, GROUP, VERSION, POLICIES),
    Watched("services", "", "v1", "services", REQUEST_LABEL),
    Watched("nodes", "", "v1", "nodes", NODE_POOL_LABEL_KEY),
)

#: Kinds the operator follows only when it queues through Kueue.
KUEUE_KINDS = frozenset({LOCAL_QUEUES, WORKLOADS})

#: Kinds that depend on an optional API: JobSets and the Jobs JobSets make.
_JOBSET_LABELS = frozenset({JOBSET_NAME_LABEL})


def watched(kueue: bool, jobset: bool) -> tuple[Watched, ...]:
    """What an operator with (or without) Kueue and JobSet follows."""
    return tuple(
        w
        for w in WATCHED
        if (kueue or w.kind not in KUEUE_KINDS)
        and (jobset or (w.kind != JOBSET_PLURAL and w.label not in _JOBSET_LABELS))
    )
