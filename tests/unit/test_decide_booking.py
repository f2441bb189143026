"""DWS Calendar mode in the reconcile decision: the booking shown before approval,
submitted once when approved, Google's review and answer, the pool on the delivered
reservation, the stop before the block's end, and deletion. Pure: `Observed` values
are built by hand."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest

from dws_operator.api import BookingState, Phase, TrainingRequestStatus
from dws_operator.reconcile import (
    STOP_LEAD_SECONDS,
    CreateJob,
    CreateNodePool,
    DeleteJob,
    ReconcileConfig,
    ScaleNodePoolToZero,
)
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import CancelBooking, SubmitBooking
from dws_operator.reconcile.advice import ADVICE_POLL_SECONDS, NO_WINDOW, advice_query
from dws_operator.reconcile.booking import request_id_for
from dws_operator.reconcile.cleanup import SUBMIT_SETTLE_SECONDS
from dws_operator.reconcile.decision import BOOKING_REFUSED, CANCEL_REFUSED
from dws_operator.reconcile.observed import AdviceView, BookingView, CalendarWindow, Observed
from tests.builders import gpu, spec_body, tpu
from tests.unit.decisions import (
    CONFIG,
    POOL,
    T0,
    UID,
    cond_tuple,
    job_view,
    observed,
    only,
    pool_for,
    run,
    status_at,
    with_,
)

START = T0 + timedelta(days=2)
#: 15 minutes (stopBefore) and the operator's lead before the block's end.
STOP = START + timedelta(hours=72) - timedelta(minutes=15, seconds=STOP_LEAD_SECONDS)
BLOCK = {"startTime": "2025-06-03T12:00:00Z", "duration": "72h", "stopBefore": "15m"}
GPU_BLOCK = spec_body(
    gpu("nvidia-h100-80gb", nodes=2),
    provisioning={"mode": "Calendar", "zones": ["us-east5-a"], "calendar": BLOCK},
)
APPROVED = with_(GPU_BLOCK, approveBooking=True)


def seen(obs: Observed, procurement: str, *reservations: str) -> Observed:
    return dataclasses.replace(obs, booking=BookingView(procurement, reservations))


def after(decision_status: TrainingRequestStatus, body: dict[str, Any], **kw: Any) -> Observed:
    return observed(body, decision_status, **kw)


def test_nothing_is_booked_before_approval_and_the_status_shows_what_would_be() -> None:
    decision = run(observed(GPU_BLOCK))
    assert decision.actions == []
    # Looked at again only at the start, to give up then; the approval wakes it sooner.
    assert decision.requeue_after == pytest.approx((START - T0).total_seconds() + 1)
    assert decision.status.phase == Phase.PENDING
    booking = decision.status.booking
    assert booking is not None
    assert booking.state == BookingState.AWAITING_APPROVAL
    assert (booking.name, booking.zone, booking.count, booking.unit) == (
        POOL,
        "us-east5-a",
        2,
        "VMs",
    )
    assert booking.machine_type == "a3-highgpu-8g"
    assert booking.start_time == START
    assert booking.end_time == START + timedelta(hours=72)
    assert cond_tuple(decision, cond.BOOKED) == ("False", "AwaitingApproval")
    assert "approveBooking" in (decision.status.message or "")


def test_approved_it_is_submitted_with_a_request_id_from_the_uid_and_once_seen_not_again() -> None:
    first = run(observed(APPROVED))
    [submit] = only(first.actions, SubmitBooking)
    assert submit.booking.request_id == request_id_for(UID)
    assert submit.booking.name == POOL
    assert first.status.booking is not None
    assert first.status.booking.state == BookingState.SUBMITTED
    assert first.status.booking.submitted_at == T0
    # Not seen yet on the next pass (the answer was lost): submitted again, the same id.
    again = run(after(first.status, APPROVED, now=T0 + timedelta(seconds=5)))
    assert [a.booking.request_id for a in only(again.actions, SubmitBooking)] == [
        request_id_for(UID)
    ]
    assert again.status.booking is not None
    assert again.status.booking.submitted_at == T0
    # Seen under review: nothing more is sent, Compute is asked again within a minute.
    review = run(seen(after(first.status, APPROVED), "PENDING_APPROVAL"))
    assert review.actions == []
    assert review.status.booking is not None
    assert review.status.booking.state == BookingState.UNDER_REVIEW
    assert review.requeue_after is not None
    assert review.requeue_after <= 60


def test_the_operator_may_book_without_approval() -> None:
    decision = run(
        observed(GPU_BLOCK), ReconcileConfig(location="us-east5", book_without_approval=True)
    )
    assert len(only(decision.actions, SubmitBooking)) == 1


def test_approved_it_waits_for_the_start_and_then_the_pool_is_made_on_the_reservation() -> None:
    submitted = run(observed(APPROVED)).status
    waiting = run(seen(after(submitted, APPROVED, now=T0 + timedelta(minutes=10)), "PROCURING"))
    assert waiting.tally.approval_seconds == 600
    assert waiting.actions == []
    assert waiting.status.phase == Phase.PENDING
    assert cond_tuple(waiting, cond.BOOKED) == ("True", "Approved")
    # Woken just after the start, not before.
    assert waiting.requeue_after is not None
    until = START - (T0 + timedelta(minutes=10))
    assert until <= timedelta(seconds=waiting.requeue_after) < until + timedelta(minutes=1)
    delivered = run(seen(after(waiting.status, APPROVED, now=START), "FULFILLED", POOL))
    [create] = only(delivered.actions, CreateNodePool)
    affinity = create.plan.node_pool.reservation_affinity
    assert affinity is not None
    assert affinity.values == (POOL,)
    assert delivered.status.booking is not None
    assert delivered.status.booking.state == BookingState.DELIVERED
    assert delivered.status.requested_at == START
    # The stop before the end is a timer: at most 72h - 15m - the lead (and a second) away.
    assert delivered.requeue_after is not None
    assert delivered.requeue_after <= (STOP - START).total_seconds() + 1


def test_a_declined_booking_fails_the_request_or_moves_down_its_ladder() -> None:
    submitted = run(observed(APPROVED)).status
    declined = run(seen(after(submitted, APPROVED), "DECLINED"))
    assert declined.status.phase == Phase.FAILED
    assert cond_tuple(declined, cond.BOOKED) == ("False", "BookingDeclined")
    assert "DECLINED" in (declined.status.message or "")
    ladder = with_(APPROVED, provisioning={"fallback": [{"mode": "FlexStart"}]})
    moved = run(seen(observed(ladder, run(observed(ladder)).status), "DECLINED"))
    assert moved.status.phase != Phase.FAILED
    assert moved.status.step == 2


def test_the_workload_is_stopped_before_the_block_ends_and_the_request_ends() -> None:
    submitted = run(observed(APPROVED)).status
    on = run(seen(after(submitted, APPROVED, now=START), "FULFILLED", POOL)).status
    running = status_at(Phase.RUNNING, APPROVED, requested=START, started=START, booking=on.booking)

    def at(moment: datetime, **job: Any) -> Observed:
        obs = after(
            running,
            APPROVED,
            now=moment,
            pool=pool_for(APPROVED),
            job=job_view(**job),
            service=True,
        )
        return seen(dataclasses.replace(obs, nodes_by_pool={POOL: 2}), "FULFILLED", POOL)

    early = run(at(STOP - timedelta(seconds=1), ready=2))
    assert early.actions == []
    assert early.status.phase == Phase.RUNNING
    ended = run(at(STOP, ready=2))
    assert [a.name for a in only(ended.actions, DeleteJob)] == ["llama"]
    assert ended.status.phase == Phase.FAILED
    assert "BlockEnded" in (ended.status.message or "")
    # Both reserved VMs held from the start to the stop: all of the block but the stop.
    assert ended.tally.block_utilisation == pytest.approx((STOP - START) / timedelta(hours=72))
    # A workload that finished on its own before the stop keeps its own outcome.
    done = run(at(STOP, complete=True))
    assert only(done.actions, DeleteJob) == []
    assert done.status.phase == Phase.SUCCEEDED


def test_its_pods_get_the_stop_as_their_grace_period() -> None:
    submitted = run(observed(APPROVED)).status
    on = run(seen(after(submitted, APPROVED, now=START), "FULFILLED", POOL))
    ready = after(on.status, APPROVED, now=START, pool=pool_for(APPROVED))
    created = run(seen(ready, "FULFILLED", POOL))
    [job] = only(created.actions, CreateJob)
    assert job.manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 900


def test_deleting_cancels_a_booking_under_review_and_keeps_an_approved_one() -> None:
    submitted = run(observed(APPROVED)).status
    reviewing = seen(after(submitted, APPROVED, deleting=True), "PENDING_APPROVAL")
    cancelling = run(reviewing)
    assert only(cancelling.actions, CancelBooking) == [CancelBooking(POOL, "us-east5-a")]
    assert not cancelling.released
    cancelled = run(seen(after(submitted, APPROVED, deleting=True), "CANCELLED"))
    assert cancelled.released
    locked = run(seen(after(submitted, APPROVED, deleting=True), "PROCURING"))
    assert only(locked.actions, CancelBooking) == []
    assert locked.released
    assert "billed for it until 2025-06-06T12:00:00Z" in (locked.status.message or "")


def test_a_tpu_block_books_chips() -> None:
    body = spec_body(
        tpu("v6e", "4x4"),
        provisioning={"mode": "Calendar", "zones": ["us-east5-b"], "calendar": BLOCK},
    )
    decision = run(observed(body))
    booking = decision.status.booking
    assert booking is not None
    assert (booking.count, booking.unit, booking.zone) == (16, "chips", "us-east5-b")


def test_the_default_config_asks_for_approval() -> None:
    assert CONFIG.book_without_approval is False
    assert only(run(observed(GPU_BLOCK), CONFIG).actions, SubmitBooking) == []


def test_a_block_not_approved_by_its_start_is_given_up() -> None:
    waiting = run(observed(GPU_BLOCK)).status
    missed = run(after(waiting, APPROVED, now=START))
    assert only(missed.actions, SubmitBooking) == []
    assert missed.status.phase == Phase.FAILED
    assert "passed before the booking was submitted" in (missed.status.message or "")


def test_a_booking_not_delivered_by_the_stop_is_given_up() -> None:
    submitted = run(observed(APPROVED)).status
    for procurement in ("PENDING_APPROVAL", "PROCURING"):
        late = run(seen(after(submitted, APPROVED, now=STOP), procurement))
        assert late.status.phase == Phase.FAILED
        assert cond_tuple(late, cond.BOOKED) == ("False", "BookingDeclined")
    # Submitted and never seen: not submitted again once its block is as good as over.
    unseen = run(after(submitted, APPROVED, now=STOP))
    assert only(unseen.actions, SubmitBooking) == []
    assert unseen.status.phase == Phase.FAILED


def test_a_booking_of_that_name_made_by_someone_else_is_not_used() -> None:
    submitted = run(observed(APPROVED)).status
    obs = after(submitted, APPROVED, now=START)
    foreign = run(dataclasses.replace(obs, booking=BookingView("FULFILLED", (POOL,), ours=False)))
    assert foreign.status.phase == Phase.FAILED
    assert only(foreign.actions, CreateNodePool) == []
    assert cond_tuple(foreign, cond.BOOKED) == ("False", "BookingNameTaken")


def test_the_booking_is_named_from_the_uid_whatever_the_pool_is_called() -> None:
    named = with_(APPROVED, nodePool={"name": "team-pool"})
    [submit] = only(run(observed(named)).actions, SubmitBooking)
    assert submit.booking.name == POOL


def test_a_delivered_block_is_waited_on_past_maxwaitduration() -> None:
    submitted = run(observed(APPROVED)).status
    on = run(seen(after(submitted, APPROVED, now=START), "FULFILLED", POOL)).status
    later = START + timedelta(hours=30)  # past the default 24h wait, before the stop
    waiting = run(seen(after(on, APPROVED, now=later, pool=pool_for(APPROVED)), "FULFILLED", POOL))
    assert waiting.status.phase != Phase.FAILED
    assert waiting.status.step is None


def test_deleting_holds_a_submitted_booking_not_seen_yet_for_a_while() -> None:
    submitted = run(observed(APPROVED)).status
    early = run(after(submitted, APPROVED, now=T0 + timedelta(minutes=1), deleting=True))
    assert not early.released
    assert early.requeue_after is not None
    assert early.requeue_after <= SUBMIT_SETTLE_SECONDS
    late = run(after(submitted, APPROVED, now=T0 + timedelta(minutes=11), deleting=True))
    assert late.released
    assert "never seen" in (late.status.message or "")


def test_a_tpu_booking_is_never_cancelled() -> None:
    body = with_(
        spec_body(
            tpu("v6e", "4x4"),
            provisioning={"mode": "Calendar", "zones": ["us-east5-b"], "calendar": BLOCK},
        ),
        approveBooking=True,
    )
    submitted = run(observed(body)).status
    deleted = run(seen(after(submitted, body, deleting=True), "PENDING_APPROVAL"))
    assert only(deleted.actions, CancelBooking) == []
    assert deleted.released
    assert "stays" in (deleted.status.message or "")


def test_after_the_stop_the_pools_stay_until_the_block_ends() -> None:
    submitted = run(observed(APPROVED)).status
    on = run(seen(after(submitted, APPROVED, now=START), "FULFILLED", POOL)).status
    running = status_at(Phase.RUNNING, APPROVED, requested=START, started=START, booking=on.booking)
    obs = after(
        running, APPROVED, now=STOP, pool=pool_for(APPROVED), job=job_view(ready=2), service=True
    )
    ended = run(seen(dataclasses.replace(obs, nodes_by_pool={POOL: 2}), "FULFILLED", POOL))
    # The next pass (the request now Failed, BlockEnded): no scale-down before the end.
    after_stop = after(
        ended.status, APPROVED, now=STOP + timedelta(minutes=1), pool=pool_for(APPROVED)
    )
    held = run(dataclasses.replace(after_stop, nodes_by_pool={POOL: 2}))
    assert only(held.actions, ScaleNodePoolToZero) == []
    end = START + timedelta(hours=72)
    assert held.requeue_after == pytest.approx(
        (end - (STOP + timedelta(minutes=1))).total_seconds() + 1
    )
    at_end = after(ended.status, APPROVED, now=end, pool=pool_for(APPROVED))
    gone = run(dataclasses.replace(at_end, nodes_by_pool={POOL: 2}))
    assert [a.name for a in only(gone.actions, ScaleNodePoolToZero)] == [POOL]


def test_time_to_capacity_counts_from_the_blocks_delivery() -> None:
    submitted = run(observed(APPROVED)).status
    on = run(seen(after(submitted, APPROVED, now=START), "FULFILLED", POOL)).status
    ready = status_at(Phase.PROVISIONING, APPROVED, requested=START, job=None, booking=on.booking)
    obs = after(
        ready,
        APPROVED,
        now=START + timedelta(minutes=5),
        pool=pool_for(APPROVED),
        job=job_view(ready=2),
        service=True,
    )
    obs = dataclasses.replace(
        obs, request=dataclasses.replace(obs.request, created=T0), nodes_by_pool={POOL: 2}
    )
    decision = run(seen(obs, "FULFILLED", POOL))
    assert decision.status.started_at is not None
    assert decision.tally.waited_seconds == 300


def _delivered() -> TrainingRequestStatus:
    submitted = run(observed(APPROVED)).status
    return run(seen(after(submitted, APPROVED, now=START), "FULFILLED", POOL)).status


def test_a_delivered_block_never_times_out_even_with_its_job_waiting() -> None:
    on = _delivered()
    waiting = status_at(Phase.WAITING_FOR_CAPACITY, APPROVED, requested=START, booking=on.booking)
    later = START + timedelta(hours=30)
    obs = after(
        waiting, APPROVED, now=later, pool=pool_for(APPROVED), job=job_view(ready=0), service=True
    )
    decision = run(seen(obs, "FULFILLED", POOL))
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY
    # No maxWaitDuration timer either (it would fire every second once past).
    assert decision.requeue_after is None or decision.requeue_after > 60


def test_once_submitted_withdrawing_the_approval_changes_nothing() -> None:
    submitted = run(observed(APPROVED)).status
    withdrawn = with_(APPROVED, approveBooking=False)
    again = run(after(submitted, withdrawn, now=T0 + timedelta(seconds=30)))
    assert again.status.booking is not None
    assert again.status.booking.state == BookingState.SUBMITTED
    assert len(only(again.actions, SubmitBooking)) == 1


def test_a_submitted_booking_unseen_at_the_start_moves_down_the_ladder() -> None:
    ladder = with_(APPROVED, provisioning={"fallback": [{"mode": "FlexStart"}]})
    submitted = run(observed(ladder)).status
    moved = run(after(submitted, ladder, now=START))
    assert only(moved.actions, SubmitBooking) == []
    assert moved.status.step == 2
    assert moved.status.booking is not None
    assert moved.status.booking.state == BookingState.DECLINED


def test_a_refused_submit_moves_down_the_ladder_or_fails() -> None:
    ladder = with_(APPROVED, provisioning={"fallback": [{"mode": "FlexStart"}]})
    submitted = run(observed(ladder)).status
    obs = dataclasses.replace(
        after(submitted, ladder), refusal=(BOOKING_REFUSED, "PermissionDenied: no")
    )
    moved = run(obs)
    assert moved.status.step == 2
    alone = run(
        dataclasses.replace(
            after(run(observed(APPROVED)).status, APPROVED),
            refusal=(BOOKING_REFUSED, "InvalidArgument: start"),
        )
    )
    assert alone.status.phase == Phase.FAILED
    assert alone.status.booking is not None
    assert alone.status.booking.state == BookingState.DECLINED


def test_a_block_not_delivered_by_the_stop_is_declined_in_the_status() -> None:
    submitted = run(observed(APPROVED)).status
    late = run(seen(after(submitted, APPROVED, now=STOP), "PROCURING"))
    assert late.status.booking is not None
    assert late.status.booking.state == BookingState.DECLINED


def test_deleting_never_cancels_a_booking_that_is_not_ours() -> None:
    submitted = run(observed(APPROVED)).status
    obs = after(submitted, APPROVED, deleting=True)
    foreign = BookingView("PENDING_APPROVAL", (), ours=False)
    deleted = run(dataclasses.replace(obs, booking=foreign))
    assert only(deleted.actions, CancelBooking) == []
    assert deleted.released


def test_a_cancel_compute_refuses_lets_the_request_go_saying_the_booking_stays() -> None:
    submitted = run(observed(APPROVED)).status
    obs = seen(after(submitted, APPROVED, deleting=True), "PENDING_APPROVAL")
    refused = run(dataclasses.replace(obs, refusal=(CANCEL_REFUSED, "PermissionDenied: no")))
    assert only(refused.actions, CancelBooking) == []
    assert refused.released
    assert "refused to cancel" in (refused.status.message or "")


def test_the_wait_for_an_unseen_submit_counts_from_the_last_insert() -> None:
    submitted = run(observed(APPROVED)).status
    resent = run(after(submitted, APPROVED, now=T0 + timedelta(minutes=9))).status
    assert resent.booking is not None
    assert resent.booking.last_submitted_at == T0 + timedelta(minutes=9)
    held = run(after(resent, APPROVED, now=T0 + timedelta(minutes=12), deleting=True))
    assert not held.released


def test_the_booking_ends_with_its_block() -> None:
    on = _delivered()
    done = status_at(Phase.SUCCEEDED, APPROVED, requested=START, booking=on.booking)
    end = START + timedelta(hours=72)
    ended = run(after(done, APPROVED, now=end, pool=pool_for(APPROVED, max_nodes=0)))
    assert ended.status.booking is not None
    assert ended.status.booking.state == BookingState.ENDED


# The block's start picked from Compute's calendar-mode advice (earliest/latest) -------

EARLIEST, LATEST = T0 + timedelta(days=1), T0 + timedelta(days=20)
WINDOW_START = T0 + timedelta(days=3)
PICKED = with_(
    APPROVED,
    provisioning={
        "calendar": {
            "earliest": "2025-06-02T12:00:00Z",
            "latest": "2025-06-21T12:00:00Z",
            "duration": "72h",
            "stopBefore": "15m",
        }
    },
)
SHOWN = with_(PICKED, approveBooking=False)


def advised(obs: Observed, start: datetime | None, why: str = "") -> Observed:
    window = (
        CalendarWindow(start, start + timedelta(hours=72), "rec-1") if start is not None else None
    )
    return dataclasses.replace(obs, advice=AdviceView(window, why))


def test_the_spec_dates_are_the_ones_the_tests_mean() -> None:
    assert (
        datetime.fromisoformat("2025-06-02T12:00:00+00:00"),
        datetime.fromisoformat("2025-06-21T12:00:00+00:00"),
    ) == (EARLIEST, LATEST)


def test_the_advised_window_is_shown_then_booked_as_shown() -> None:
    shown = run(advised(observed(SHOWN), WINDOW_START))
    assert shown.actions == []
    booking = shown.status.booking
    assert booking is not None
    assert booking.state == BookingState.AWAITING_APPROVAL
    assert (booking.start_time, booking.end_time) == (
        WINDOW_START,
        WINDOW_START + timedelta(hours=72),
    )
    assert booking.recommendation_id == "rec-1"
    # Approved later, with no advice asked that pass: the window shown is the one booked.
    approved = run(after(shown.status, PICKED, now=T0 + timedelta(hours=5)))
    [submit] = only(approved.actions, SubmitBooking)
    assert (submit.booking.start, submit.booking.recommendation_id) == (WINDOW_START, "rec-1")


def test_a_submitted_window_stands_whatever_the_advice_says_later() -> None:
    submitted = run(advised(observed(PICKED), WINDOW_START)).status
    assert submitted.booking is not None
    assert submitted.booking.state == BookingState.SUBMITTED
    later = T0 + timedelta(days=5)
    again = run(advised(after(submitted, PICKED, now=T0 + timedelta(seconds=5)), later))
    [submit] = only(again.actions, SubmitBooking)
    assert submit.booking.start == WINDOW_START


def test_a_shown_window_that_started_unapproved_gives_way_to_a_new_one() -> None:
    shown = run(advised(observed(SHOWN), WINDOW_START)).status
    past = WINDOW_START + timedelta(minutes=1)
    new_start = T0 + timedelta(days=6)
    moved = run(advised(after(shown, SHOWN, now=past), new_start))
    assert moved.status.booking is not None
    assert moved.status.booking.start_time == new_start
    assert moved.status.booking.state == BookingState.AWAITING_APPROVAL


def test_without_a_window_it_waits_and_asks_again_then_gives_up_past_latest() -> None:
    waiting = run(advised(observed(PICKED), None, "NO_CAPACITY: none free"))
    assert waiting.actions == []
    assert waiting.status.phase == Phase.PENDING
    assert waiting.status.booking is None
    assert cond_tuple(waiting, cond.BOOKED) == ("False", NO_WINDOW)
    assert "NO_CAPACITY: none free" in (waiting.status.message or "")
    assert waiting.requeue_after == ADVICE_POLL_SECONDS
    # The last ask before latest comes at latest.
    near = run(advised(observed(PICKED, now=LATEST - timedelta(seconds=30)), None))
    assert near.requeue_after == pytest.approx(31)
    over = run(advised(observed(PICKED, now=LATEST + timedelta(seconds=1)), None))
    assert over.status.phase == Phase.FAILED
    assert cond_tuple(over, cond.COMPLETED) == ("False", NO_WINDOW)
    ladder = with_(PICKED, provisioning={"fallback": [{"mode": "FlexStart"}]})
    moved = run(advised(observed(ladder, now=LATEST + timedelta(seconds=1)), None))
    assert moved.status.step == 2


def test_a_window_outside_earliest_and_latest_is_not_taken() -> None:
    outside = run(advised(observed(PICKED), LATEST + timedelta(days=1)))
    assert outside.actions == []
    assert cond_tuple(outside, cond.BOOKED) == ("False", NO_WINDOW)


def test_the_advice_is_asked_only_while_no_window_stands() -> None:
    fresh = observed(PICKED)
    query = advice_query(fresh.request, T0)
    assert query is not None
    assert (query.zone, query.earliest, query.latest) == ("us-east5-a", EARLIEST, LATEST)
    assert (query.count, query.machine_type, query.tpu_family) == (2, "a3-highgpu-8g", None)
    assert query.duration == timedelta(hours=72)
    # Past earliest, from now.
    assert advice_query(fresh.request, EARLIEST + timedelta(hours=1)).earliest == (  # type: ignore[union-attr]
        EARLIEST + timedelta(hours=1)
    )
    submitted = run(advised(fresh, WINDOW_START)).status
    assert advice_query(observed(PICKED, submitted).request, T0) is None
    shown = run(advised(observed(SHOWN), WINDOW_START)).status
    assert advice_query(observed(SHOWN, shown).request, T0) is None
    assert advice_query(observed(SHOWN, shown).request, WINDOW_START) is not None
    assert advice_query(observed(PICKED, deleting=True).request, T0) is None
    assert advice_query(observed(APPROVED).request, T0) is None  # a fixed startTime
    assert advice_query(fresh.request, LATEST + timedelta(seconds=1)) is None
    tpus = spec_body(
        tpu("v6e", "4x4"),
        provisioning=PICKED["provisioning"],
        approveBooking=True,
    )
    tpu_query = advice_query(observed(tpus).request, T0)
    assert tpu_query is not None
    assert (tpu_query.count, tpu_query.tpu_family) == (
        16,
        "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E",
    )


def test_a_block_delivered_in_part_is_no_block_for_the_slice() -> None:
    # Compute delivered fewer VMs than asked: the slice cannot run on them; the next
    # ladder step takes over, else the request fails, saying so.
    submitted = run(observed(APPROVED)).status
    partial = run(seen(after(submitted, APPROVED, now=START), "FAILED_PARTIALLY_FULFILLED", POOL))
    assert partial.status.phase == Phase.FAILED
    assert "FAILED_PARTIALLY_FULFILLED" in (partial.status.message or "")
    assert only(partial.actions, CreateNodePool) == []
    ladder = with_(APPROVED, provisioning={"fallback": [{"mode": "FlexStart"}]})
    moved = run(
        seen(
            observed(ladder, run(observed(ladder)).status, now=START),
            "FAILED_PARTIALLY_FULFILLED",
            POOL,
        )
    )
    assert moved.status.step == 2


def test_a_window_that_replaces_one_that_started_unbooked_needs_a_new_approval() -> None:
    shown = run(advised(observed(SHOWN), WINDOW_START)).status
    # Approved (generation 2) only after the window shown has started: the next window
    # is shown, not booked on an approval given for the other.
    past = WINDOW_START + timedelta(minutes=1)
    new_start = T0 + timedelta(days=6)
    late = run(advised(observed(PICKED, shown, now=past, generation=2), new_start))
    assert only(late.actions, SubmitBooking) == []
    booking = late.status.booking
    assert booking is not None
    assert (booking.start_time, booking.state) == (new_start, BookingState.AWAITING_APPROVAL)
    assert booking.approval_generation == 2
    assert "false and back to true" in (late.status.message or "")
    # The same approval, passes later: still not booked.
    again = run(observed(PICKED, late.status, now=past + timedelta(minutes=5), generation=2))
    assert only(again.actions, SubmitBooking) == []
    # Set to false and back to true (generation 4): booked, the window shown.
    given = run(observed(PICKED, late.status, now=past + timedelta(minutes=9), generation=4))
    [submit] = only(given.actions, SubmitBooking)
    assert submit.booking.start == new_start


def test_an_advice_compute_refuses_fails_the_step_in_the_same_pass() -> None:
    refused = dataclasses.replace(
        observed(PICKED), advice=AdviceView(None, "Forbidden: no permission", refused=True)
    )
    decision = run(refused)
    assert decision.status.phase == Phase.FAILED
    assert "no permission" in (decision.status.message or "")
    ladder = with_(PICKED, provisioning={"fallback": [{"mode": "FlexStart"}]})
    moved = run(dataclasses.replace(refused, request=observed(ladder).request))
    assert moved.status.step == 2
    # On the next step, nothing of the advice is left to fail it again.
    assert advice_query(observed(ladder, moved.status).request, T0) is None


def test_the_advice_is_told_to_leave_out_the_regions_other_zones() -> None:
    tpus = spec_body(
        tpu("v6e", "4x4"),
        provisioning={**PICKED["provisioning"], "zones": ["us-east5-b"]},
        approveBooking=True,
    )
    query = advice_query(observed(tpus).request, T0)
    assert query is not None
    # v6e's other calendar zone in us-east5; not asia-northeast1-b (another region).
    assert (query.zone, query.other_zones) == ("us-east5-b", ("us-east5-a",))
