"""What `dws-operator dev` prints while a request runs: phase changes with timings, nodes
arriving and leaving, a bar while it waits for capacity, and a summary. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from dws_operator.api import TERMINAL_PHASES

BAR_WIDTH = 24


@dataclass(frozen=True)
class StepView:
    """One step of a capacity ladder as the request's `status.attempts` has it."""

    step: int
    mode: str
    zones: tuple[str, ...] = ()
    outcome: str | None = None
    message: str = ""

    @property
    def where(self) -> str:
        return f"{self.mode} in {', '.join(self.zones)}" if self.zones else self.mode


@dataclass(frozen=True)
class Snapshot:
    at: float  # seconds since the request was applied
    phase: str | None
    message: str
    nodes: int  # Nodes of the request's pool that exist now
    planned_nodes: int | None
    max_wait_seconds: int | None
    restarts: int = 0
    #: The capacity ladder's attempts so far (none without fallback steps).
    steps: tuple[StepView, ...] = ()
    #: A Calendar-mode booking's state (`status.booking.state`), if the request books one.
    booking: str | None = None
    #: What the booking holds, in words, once it was seen approved (`approvedAt`): a
    #: look that missed the Approved state (the sandbox's calendar runs fast) still says it.
    booked: str | None = None


@dataclass
class ProgressLog:
    """Turns successive snapshots into the lines a person wants to read."""

    phase_times: dict[str, float] = field(default_factory=dict)
    finished_at: float | None = None
    drained_at: float | None = None
    _last: Snapshot | None = None
    _waiting_since: float | None = None
    _steps_started: set[int] = field(default_factory=set)
    _steps_ended: set[int] = field(default_factory=set)
    _approval_told: bool = False

    def update(self, now: Snapshot) -> list[str]:
        last, lines = self._last, []
        stamp = f"[{now.at:6.1f}s]"
        for step in now.steps:
            # Ended before started: a step that began and ended between two looks.
            if step.step not in self._steps_started:
                self._steps_started.add(step.step)
                lines.append(f"{stamp} step {step.step} started: {step.where}")
            if step.outcome is not None and step.step not in self._steps_ended:
                self._steps_ended.add(step.step)
                why = f" ({step.message})" if step.message else ""
                lines.append(f"{stamp} step {step.step} ended {step.outcome}: {step.where}{why}")
        if now.phase != (last.phase if last else None) and now.phase is not None:
            self.phase_times.setdefault(now.phase, now.at)
            lines.append(f"{stamp} {now.phase:<19} {now.message}".rstrip())
            if now.phase == "WaitingForCapacity":
                self._waiting_since = now.at
            if now.phase in TERMINAL_PHASES:
                self.finished_at = now.at
        if now.booking is not None and now.booking != (last.booking if last else None):
            if now.booked and now.booking != "Approved" and not self._approval_told:
                # Approved and on to the next state between two looks.
                lines.append(f"{stamp} booking {'Approved':<11} {now.booked}")
            lines.append(f"{stamp} booking {now.booking:<11} {now.message}".rstrip())
            self._approval_told = self._approval_told or now.booked is not None
        if last is not None and now.restarts != last.restarts:
            lines.append(f"{stamp} restart {now.restarts}: a node was lost, new attempt")
        before = last.nodes if last else 0
        if now.nodes != before:
            change = now.nodes - before
            total = f"/{now.planned_nodes}" if now.planned_nodes else ""
            verb = "appeared" if change > 0 else "removed"
            lines.append(f"{stamp} {abs(change)} node(s) {verb}: {now.nodes}{total} now")
            if now.nodes == 0 and self.finished_at is not None:
                self.drained_at = now.at
        self._last = now
        return lines

    def bar(self, now: Snapshot) -> str | None:
        """A one-line bar while waiting for capacity; None otherwise."""
        if now.phase != "WaitingForCapacity" or self._waiting_since is None:
            return None
        waited = now.at - self._waiting_since
        if not now.max_wait_seconds:
            return f"waiting for capacity {waited:5.1f}s (no time limit)"
        share = min(waited / now.max_wait_seconds, 1.0)
        filled = round(share * BAR_WIDTH)
        return (
            f"waiting for capacity [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
            f"{waited:5.1f}s of {now.max_wait_seconds}s"
        )

    def summary(self) -> list[str]:
        lines = ["phase timings:"]
        ordered = sorted(self.phase_times.items(), key=lambda item: item[1])
        for (phase, start), nxt in zip(ordered, [*ordered[1:], None], strict=True):
            until = f"{nxt[1] - start:6.1f}s" if nxt else "      -"
            lines.append(f"  {phase:<19} at {start:6.1f}s  for {until}")
        if self.finished_at is not None and self.drained_at is not None:
            idle = self.drained_at - self.finished_at
            lines.append(f"idle node time after the work ended: {idle:.1f}s")
        return lines
