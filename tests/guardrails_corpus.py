"""One corpus of TrainingPolicies and TrainingRequests, run through the operator's rules
(`dws_operator.guardrails`) and the API server's (the generated admission policy): the two
must agree on every pair."""

from __future__ import annotations

from typing import Any

from tests.builders import gpu, spec_body, tpu
from tests.corpus import BLOCK

#: Each policy limits something, so a request breaking it exists in `REQUESTS`.
POLICIES: dict[str, dict[str, Any]] = {
    "trillium-only": {"accelerators": ["v6e"]},
    "gpus-flex": {"accelerators": ["nvidia-h100-80gb", "nvidia-l4"], "modes": ["FlexStart"]},
    "no-calendar": {
        "modes": ["FlexStart", "QueuedProvisioning", "Spot", "OnDemand", "Reservation"]
    },
    "own-reservations": {"reservations": ["r1", "projects/shared-proj/reservations/*"]},
    "no-reservations": {"reservations": []},
    "small": {"maxChipsPerRequest": 16, "maxNodesPerRequest": 4},
    "few-nodes": {"maxNodesPerRequest": 2},
    "in-flight": {"maxChipsInFlight": 64, "maxNodesInFlight": 8},
}

REQUESTS: dict[str, dict[str, Any]] = {
    "v6e-2x4": spec_body(tpu("v6e", "2x4")),
    "v6e-4x4-spot": spec_body(tpu("v6e", "4x4"), "Spot"),
    "v6e-2x4-8t": spec_body(tpu("v6e", "2x4", "ct6e-standard-8t")),
    "v6e-1x1": spec_body(tpu("v6e", "1x1")),
    "v5p-4x4x4": spec_body(tpu("v5p", "4x4x4")),
    "v5p-2x2x1-slices": spec_body(tpu("v5p", "2x2x2", slices=4)),
    "tpu7x-cube": spec_body(tpu("tpu7x", "4x4x8")),
    "v5e-queued": spec_body(tpu("v5e", "2x4"), "QueuedProvisioning", queueName="q"),
    "h100x2": spec_body(gpu("nvidia-h100-80gb", nodes=2)),
    "h100x9": spec_body(gpu("nvidia-h100-80gb", nodes=9)),
    "l4-count": spec_body(gpu("nvidia-l4", nodes=3, count=2)),
    "l4-machine": spec_body(gpu("nvidia-l4", nodes=1, machine_type="g2-standard-48")),
    "a100-ladder": spec_body(
        gpu("nvidia-a100-80gb", nodes=1),
        provisioning={"fallback": [{"mode": "Spot"}, {"mode": "OnDemand"}]},
    ),
    "reservation-own": spec_body(
        gpu("nvidia-h100-80gb", nodes=1), "Reservation", provisioning={"reservation": "r1"}
    ),
    "reservation-block": spec_body(
        gpu("nvidia-h100-80gb", nodes=1),
        "Reservation",
        provisioning={"reservation": "r1/reservationBlocks/b1"},
    ),
    "reservation-shared": spec_body(
        gpu("nvidia-h100-80gb", nodes=1),
        "Reservation",
        provisioning={"reservation": "projects/shared-proj/reservations/big"},
    ),
    "reservation-other-project": spec_body(
        gpu("nvidia-h100-80gb", nodes=1),
        "Reservation",
        provisioning={"reservation": "projects/other-proj/reservations/r1"},
    ),
    "h100-calendar": spec_body(
        gpu("nvidia-h100-80gb", nodes=2),
        "Calendar",
        provisioning={"calendar": BLOCK, "zones": ["us-east5-a"]},
    ),
    "ladder-to-reservation": spec_body(
        tpu("v6e", "2x4"),
        provisioning={"fallback": [{"mode": "Reservation", "reservation": "r2"}]},
    ),
}
