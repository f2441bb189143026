"""The shell's booking side against a client that fails: a deletion is not held by a
Compute it cannot read; a live request's pass fails (and is retried) instead."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from dws_operator.api import BookingState, BookingStatus, TrainingRequestStatus
from dws_operator.controller.bookings import Bookings
from dws_operator.gke import GkeError
from dws_operator.reconcile import ADVICE_POLL_SECONDS, AdviceQuery, AdviceView
from tests.unit.decisions import T0, request
from tests.unit.test_decide_booking import APPROVED, PICKED


class Refusing:
    """A booking client whose every read is refused for good."""

    async def read(self, zone: str, name: str, uid: str) -> Any:
        raise GkeError(retryable=False, reason="PermissionDenied", message="no")


def _request(deleting: bool) -> Any:
    booking = BookingStatus(
        name="dws-llama",
        zone="us-east5-a",
        start_time=T0,
        end_time=T0,
        count=2,
        unit="VMs",
        machine_type="a3-highgpu-8g",
        state=BookingState.UNDER_REVIEW,
    )
    return request(APPROVED, TrainingRequestStatus(booking=booking), deleting=deleting)


def test_a_deletion_is_not_held_by_a_compute_it_cannot_read() -> None:
    bookings = Bookings(Refusing)  # type: ignore[arg-type]
    assert asyncio.run(bookings.read(_request(deleting=True))) is None


def test_a_live_request_fails_its_pass_instead() -> None:
    bookings = Bookings(Refusing)  # type: ignore[arg-type]
    with pytest.raises(GkeError):
        asyncio.run(bookings.read(_request(deleting=False)))


def test_nothing_is_read_for_a_request_without_a_live_booking() -> None:
    bookings = Bookings(None)
    plain = dataclasses.replace(_request(deleting=False), status=TrainingRequestStatus())
    assert asyncio.run(bookings.read(plain)) is None


class Advising:
    """A booking client that answers every advice with no window, counting the asks, or
    refuses them for good."""

    def __init__(self, refuse: bool = False) -> None:
        self.asked = 0
        self.refuse = refuse

    async def advise(self, query: AdviceQuery) -> AdviceView:
        self.asked += 1
        if self.refuse:
            raise GkeError(retryable=False, reason="PermissionDenied", message="no advice")
        return AdviceView(None, "NO_CAPACITY: none")


def test_the_advice_is_asked_again_only_every_ten_minutes() -> None:
    client = Advising()
    bookings = Bookings(lambda: client)  # type: ignore[arg-type,return-value]
    waiting = request(PICKED, TrainingRequestStatus())
    key = ("ml", "llama")
    for seconds in (0, 30, 300, 599):
        answer = asyncio.run(bookings.advise(key, waiting, T0 + timedelta(seconds=seconds)))
        assert answer is not None
        assert answer.why_none == "NO_CAPACITY: none"
    assert client.asked == 1
    asyncio.run(bookings.advise(key, waiting, T0 + timedelta(seconds=ADVICE_POLL_SECONDS)))
    assert client.asked == 2


def test_a_refused_advice_is_told_in_the_same_pass_and_kept_for_none_after() -> None:
    bookings = Bookings(lambda: Advising(refuse=True))  # type: ignore[arg-type,return-value]
    key = ("ml", "llama")
    answer = asyncio.run(bookings.advise(key, request(PICKED, TrainingRequestStatus()), T0))
    assert answer is not None
    assert answer.refused
    assert "no advice" in answer.why_none
    assert bookings.refusal(key) is None
