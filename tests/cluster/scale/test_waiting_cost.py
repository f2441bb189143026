"""CI-sized guards of the load benchmark's figures (the full one is hack/bench.py): waiting
costs the same number of GKE calls at 40 requests as at 20, and GKE never sees more
operations in flight than its quota, nor a refusal for too many."""

from __future__ import annotations

from pathlib import Path

from dws_workshop.sandbox.scaling import waiting_cost
from dws_workshop.sandbox.testbed import GkeLimits

#: A create's 40 s take 1 s, so 40 creates in 5 slots take ~8 s, and five are in
#: flight together even when the operator dispatches slowly (at 0.4 s a create, a loaded
#: machine once had only four overlap: CI on 257a5fc).
LIMITS = GkeLimits(clock_factor=40.0)
#: Looked at every second (the shortest interval allowed), so a window holds enough
#: calls for a ratio to mean something.
REFRESH = {"DWS_GKE_REFRESH_SECONDS": "1"}
#: Seconds each size's GKE calls are counted in: about eight listings.
WINDOW = 8.0


def test_waiting_costs_no_more_gke_calls_with_twice_the_requests(tmp_path: Path) -> None:
    figures = waiting_cost([20, 40], LIMITS, tmp_path, window=WINDOW, operator_env=REFRESH)
    smaller, larger = figures.stages
    assert smaller.gke_calls_per_s > 0  # the shared listing is seen at all
    ratio = larger.gke_calls_per_s / smaller.gke_calls_per_s
    # Flat: one listing per interval, whatever the number of requests (a per-request
    # poll would double it). The slack is a call of jitter each way (9 against 7 calls is
    # 1.29); 2026-11-28 counted exactly one call a second in both windows.
    assert ratio < 1.35, (smaller, larger)
    assert figures.max_operations_in_flight <= figures.quota
    assert figures.max_operations_in_flight == figures.quota  # the slots were used
    assert figures.resource_exhausted == 0
    assert figures.mutations >= 40
