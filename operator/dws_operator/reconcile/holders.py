"""A long run's capacity holders kept while wanted, and deleted once not. Pure.

The holder of the next segment's capacity (`dws_operator.holder`) is made in
`segments` when the segment runs past its time to ask; here it is let go when that no
longer holds: after a restart (the window starts again), on a ladder step it was not
made for, once the next segment's workload has taken its nodes, or when the run ends.
"""

from __future__ import annotations

from dws_operator.api import TERMINAL_PHASES
from dws_operator.holder import holder_name
from dws_operator.reconcile.actions import DeleteJob
from dws_operator.reconcile.decision import Draft
from dws_operator.reconcile.segments import current, window_of
from dws_operator.reconcile.step import StepPlan
from dws_operator.validation import segmented


def tidy_holders(run: Draft, step: StepPlan) -> None:
    """Holders no longer wanted go: the current segment's once its workload is made; the
    next segment's unless the current one runs past its time to ask for it (so not after
    a restart, nor on a ladder step it was not made for); all once the request ended."""
    status = run.status
    segment = status.segment or 1
    keep: set[str] = set()
    record = current(status)
    if status.phase not in TERMINAL_PHASES:
        if run.observed.job is None:
            keep.add(holder_name(run.request.name, segment))
        if record is not None and record.started_at is not None and segmented(step.spec):
            window = window_of(run, step, record)
            if window.ahead_at is not None and run.now >= window.ahead_at:
                keep.add(holder_name(run.request.name, segment + 1))
    for holder in run.observed.holders:
        if holder not in keep:
            run.act(DeleteJob(holder))
