"""The shell's side of Calendar-mode bookings: reading a request's booking from Compute
while it is live, submitting one for a request our finalizer holds, cancelling one.
The decision about them is `reconcile.booking`'s."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dws_operator.api import TERMINAL_PHASES, BookingState
from dws_operator.controller.cache import Key
from dws_operator.controller.lazy import OnFirstUse
from dws_operator.gke import GkeError
from dws_operator.reconcile import (
    ADVICE_POLL_SECONDS,
    BOOKING_REFUSED,
    CANCEL_REFUSED,
    AdviceQuery,
    AdviceView,
    BookingPlan,
    BookingView,
    RequestView,
    advice_query,
)

if TYPE_CHECKING:
    from dws_operator.gke.bookings import BookingClient

log = logging.getLogger(__name__)
#: How often a request's advice is asked again while it has no window.
ADVICE_EVERY = timedelta(seconds=ADVICE_POLL_SECONDS)
#: Connects the Compute client, on first use (its credentials are looked for then).
BookingConnector = Callable[[], "BookingClient"]
#: Booking states in which Compute is read on every pass of the request.
LIVE_BOOKINGS = frozenset(
    {
        BookingState.SUBMITTED,
        BookingState.UNDER_REVIEW,
        BookingState.APPROVED,
        BookingState.DELIVERED,
    }
)


def booking_of(request: RequestView) -> tuple[str, str] | None:
    """(zone, name) of the request's Calendar-mode booking while Compute has something
    to say about it: submitted and not settled, on the request's Calendar step (or
    being deleted: a booking under review is cancelled); None otherwise, so a request
    done with its block (finished, moved down its ladder) no longer depends on Compute."""
    booking = request.status.booking
    if booking is None or booking.state not in LIVE_BOOKINGS:
        return None
    if not request.deleting and (
        request.status.phase in TERMINAL_PHASES or (request.status.step or 1) > 1
    ):
        return None
    return booking.zone, booking.name


class Bookings:
    def __init__(self, connect: BookingConnector | None) -> None:
        self._client = OnFirstUse(connect)
        #: Submits Compute refused for good, by request, until its next pass decides.
        self._refused: dict[Key, tuple[str, str]] = {}
        #: The last advice asked for each request: what, when (the operator's time), and
        #: Compute's answer, used again until ADVICE_EVERY has passed.
        self._advised: dict[Key, tuple[AdviceQuery, datetime, AdviceView]] = {}

    def refusal(self, key: Key) -> tuple[str, str] | None:
        """(reason, message) of the request's submit refused since its last pass."""
        return self._refused.pop(key, None)

    async def read(self, request: RequestView) -> BookingView | None:
        """The request's booking as Compute has it, while it is live (nothing watches
        Compute: read on every pass); None otherwise."""
        where = booking_of(request)
        if where is None:
            return None
        try:
            return await self.client().read(*where, request.uid)
        except GkeError as error:
            if error.retryable or not request.deleting:
                raise
            # A deletion is not held forever by a Compute it cannot read (no permission,
            # no client): the booking counts as not seen, which lets the request go.
            log.warning(
                "%s/%s: cannot read its booking %s (%s): letting the deletion go",
                request.namespace,
                request.name,
                where[1],
                error,
            )
            return None

    async def advise(self, key: Key, request: RequestView, now: datetime) -> AdviceView | None:
        """Compute's calendar-mode advice for a request that lets the operator pick its
        block's start and has no window yet (`advice_query`); None when not asked. A
        refusal for good (no permission, a request Compute will not advise on) is kept
        for the request's next pass, whose decision fails it: no window can be found."""
        query = advice_query(request, now)
        if query is None:
            self._advised.pop(key, None)
            return None
        last = self._advised.get(key)
        same = last is not None and replace(last[0], earliest=query.earliest) == query
        if last is not None and same and (now - last[1]) < ADVICE_EVERY:
            return last[2]  # asked lately: Compute's quota is not spent on the same answer
        try:
            advice = await self.client().advise(query)
        except GkeError as error:
            if error.retryable:
                raise
            # Decided on in this very pass: no window can be found.
            return AdviceView(None, f"{error.reason}: {error.message}", refused=True)
        self._advised[key] = (query, now, advice)
        return advice

    async def submit(
        self, key: Key, body: Mapping[str, Any], booking: BookingPlan, finalizer: str
    ) -> bool:
        """Submit a booking for the request `key` that `finalizer` holds; False when it
        is not held (gone, or being deleted since it was read): a booking made then
        would outlive its request, seen by no one. A refusal for good (the start passed,
        no permission, a zone Compute does not serve) is kept for its next pass
        (`refusal`), whose decision fails the request."""
        metadata = body.get("metadata") or {}
        if finalizer not in (metadata.get("finalizers") or []):
            return False
        try:
            await self.client().submit(booking)
        except GkeError as error:
            if error.retryable:
                raise
            self._refused[key] = (BOOKING_REFUSED, f"{error.reason}: {error.message}")
        return True

    async def cancel(self, key: Key, zone: str, name: str) -> None:
        """Cancel a booking; a refusal for good (a permission missing: cancelling needs
        more than booking) is kept for the next pass, which lets the request go saying
        the booking stays, rather than holding it forever."""
        try:
            await self.client().cancel(zone, name)
        except GkeError as error:
            if error.retryable:
                raise
            self._refused[key] = (CANCEL_REFUSED, f"{error.reason}: {error.message}")

    def client(self) -> BookingClient:
        client = self._client.get()
        if client is None:
            raise GkeError(
                retryable=False,
                reason="BookingUnavailable",
                message="Calendar mode books through Compute, and this operator has no "
                "Compute client",
            )
        return client
