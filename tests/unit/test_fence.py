"""The fence every mutation passes: open without leader election, shut once the Lease
was not renewed in time, and then it calls the process's way out before refusing."""

from __future__ import annotations

import asyncio
import socket

import pytest

from dws_operator.controller.kube import KubeApi
from dws_operator.kubekit.fence import Fence, LeaseLost
from dws_operator.kubekit.leader import LeaderElector, LeaseSettings
from dws_operator.kubekit.login import Login
from dws_operator.kubekit.transport import Connection


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


@pytest.mark.parametrize(("duration", "written"), [(15, 15), (4.2, 5), (0.5, 1)])
def test_the_lease_duration_is_written_rounded_up(duration: float, written: int) -> None:
    # Others wait the whole seconds written: rounding down would let them take over
    # before this holder's renew deadline has passed.
    settings = LeaseSettings("ns", "me", duration=duration, renew_deadline=0.4, retry_period=0.3)
    assert settings.written_duration == written


def test_an_unreachable_api_server_is_a_failed_attempt_not_a_crash() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def attempt() -> tuple[bool, bool]:
        api = Connection(Login(server=f"http://127.0.0.1:{port}"), None, connections=1)
        try:
            elector = LeaderElector(KubeApi(api), LeaseSettings("ns", "me"))
            held = await elector.try_acquire_or_renew()
            await elector.release()  # holds nothing: a no-op, not an error
            return held, elector.valid()
        finally:
            await api.close()

    assert asyncio.run(attempt()) == (False, False)
