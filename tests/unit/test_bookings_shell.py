"""The shell's booking side against a client that fails: a deletion is not held by a
Compute it cannot read; a live request's pass fails (and is retried) instead."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from dws_operator.api import BookingState, BookingStatus, TrainingRequestStatus
from dws_operator.controller.bookings import Bookings
from dws_operator.gke import GkeError
from tests.unit.decisions import T0, request
from tests.unit.test_decide_booking import APPROVED


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
