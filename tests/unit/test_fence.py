"""The fence every mutation passes: open without leader election, shut once the Lease
was not renewed in time, and then it calls the process's way out before refusing."""

from __future__ import annotations

import pytest

from dws_operator.controller.fence import Fence, LeaseLost
from dws_operator.controller.leader import LeaseSettings


class Renewals:
    """A holder whose validity the test sets (what LeaderElector.valid() reports)."""

    def __init__(self) -> None:
        self.renewed = True

    def valid(self) -> bool:
        return self.renewed

    def describe(self) -> str:
        return "lease ops/dws-operator"


def test_open_without_leader_election() -> None:
    Fence().check()  # nothing armed: a single replica always acts


def test_open_while_renewed_shut_after() -> None:
    fence, holder, calls = Fence(), Renewals(), []
    fence.arm(holder, calls.append)
    fence.check()
    assert calls == []
    holder.renewed = False
    with pytest.raises(LeaseLost, match="lease ops/dws-operator not renewed in time"):
        fence.check()
    assert len(calls) == 1
    assert isinstance(calls[0], LeaseLost)
    fence.disarm()
    fence.check()


@pytest.mark.parametrize(
    ("duration", "deadline", "retry", "words"),
    [
        (10, 10, 2, "must be longer than the renew deadline"),
        (15, 10, 9, "x the retry period"),
        (15, 10, 0, "must be positive"),
    ],
)
def test_lease_settings_are_checked(
    duration: float, deadline: float, retry: float, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        LeaseSettings("ns", "me", duration=duration, renew_deadline=deadline, retry_period=retry)
