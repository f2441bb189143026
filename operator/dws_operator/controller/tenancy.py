"""What a pass needs of its namespace for the TrainingPolicies' in-flight limits: the
policies, what the namespace's other requests hold or ask for, and who waits ahead.

Read from the cache and the requests this process admitted and has not yet seen
written: a pass admits in its decision, and the status write that says so comes back
later, so two passes of one namespace must not both find room for the last chips. The
reading, the decision and the noting happen with no await between them (one event loop),
so no other pass runs in between.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dws_operator.api import TERMINAL_PHASES, TrainingRequestStatus
from dws_operator.controller.cache import Key, KubeCache
from dws_operator.guardrails import Size
from dws_operator.reconcile import Observed, admitted


class PolicyLedger:
    def __init__(self, cache: KubeCache, wake: Callable[[Key], None] = lambda _: None) -> None:
        self.cache = cache
        #: Looks at a request again (the work queue's `add`).
        self.wake = wake
        #: Requests admitted by this process whose status the cache does not show yet.
        self._admitted: dict[Key, Size] = {}

    def observed(self, key: Key, created: str, observed: Observed) -> Observed:
        """`observed` with the namespace's policies and, while the request is not yet
        past them, its namespace's use."""
        policies = self.cache.policies(key[0])
        if not policies:
            return observed
        if admitted(observed.request.status):
            return dataclasses.replace(observed, policies=policies)
        used, behind = Size(), None
        for other, summary in self.cache.in_namespace(key[0]):
            if other == key:
                continue
            noted = self._admitted.get(other)
            if summary.ended or (noted is not None and summary.admitted and summary.size.chips):
                self._admitted.pop(other, None)  # written, or over: the cache says it
                noted = None
            if summary.holding:
                used = used + summary.size
            elif noted is not None:
                used = used + noted
            elif (
                summary.held
                and not (summary.ended or summary.deleting)
                and (summary.created, other[1]) < (created, key[1])
            ):
                # Only one its policies hold: a request whose passes fail before its
                # policies are looked at holds up no one.
                behind = min(behind or (summary.created, other[1]), (summary.created, other[1]))
        return dataclasses.replace(
            observed,
            policies=policies,
            in_flight=used,
            waits_behind=f"{key[0]}/{behind[1]}" if behind else "",
        )

    def note(
        self,
        key: Key,
        before: TrainingRequestStatus,
        after: TrainingRequestStatus,
        size: Size | None,
    ) -> None:
        """After a pass's decision, before its status is written: a request it admitted
        is counted until the cache shows it, and the namespace's oldest waiting request
        is looked at (it may go too; when it does, it wakes the next)."""
        now_admitted = size is not None and not admitted(before) and admitted(after)
        if now_admitted and size is not None:
            self._admitted[key] = size
            self.wake_next(key)

    def written(
        self, key: Key, before: TrainingRequestStatus, after: TrainingRequestStatus
    ) -> None:
        """After a pass's status was written (and so is in the cache): when the request
        ended or its pools went to zero, the namespace's oldest waiting request looks
        again, and finds the room made."""
        ended = after.phase in TERMINAL_PHASES and before.phase not in TERMINAL_PHASES
        released = after.scaled_down_at is not None and before.scaled_down_at is None
        if ended or released:
            self.wake_next(key)

    def wake_next(self, key: Key) -> None:
        """Look at the oldest request of `key`'s namespace still waiting for its
        policies, other than `key`."""
        if not self.cache.policies(key[0]):
            return
        waiting = [
            (summary.created, other)
            for other, summary in self.cache.in_namespace(key[0])
            if other != key
            and other not in self._admitted
            and not (summary.admitted or summary.ended or summary.deleting)
        ]
        if waiting:
            self.wake(min(waiting)[1])

    def forget(self, key: Key) -> None:
        """The request is gone, or its pass's status was not written: nothing of it is
        counted but what the cache shows."""
        self._admitted.pop(key, None)
