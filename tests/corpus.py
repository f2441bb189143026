"""TrainingRequests GKE would refuse, shared by the unit tests (Python rules) and the
cluster tests (the API server's CEL rules): both must reject each, naming the same field."""

from __future__ import annotations

from typing import Any

from tests.builders import gpu, tpu

#: (case, make_spec kwargs, field the error must name, words the Python message contains)
#: A calendar-mode block (DWS Calendar) that Compute would book.
BLOCK = {"startTime": "2030-01-06T08:00:00Z", "duration": "72h"}
#: Instead of startTime: let the operator pick the start from Compute's advice.
WINDOW = {"earliest": "2030-01-06T08:00:00Z", "latest": "2030-01-20T08:00:00Z"}

INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "tpu-two-zones",
        {
            "accelerator": tpu("v6e", "4x4"),
            "mode": "Spot",
            "provisioning": {"zones": ["us-east5-a", "us-east5-b"]},
        },
        "spec.provisioning.zones",
        "a TPU node pool lives in one zone",
    ),
    (
        "tpu-v4-queued",
        {"accelerator": tpu("v4", "2x2x2"), "mode": "QueuedProvisioning"},
        "spec.provisioning.mode",
        "QueuedProvisioning is not available for TPU v4",
    ),
    (
        "gb200-queued",
        {"accelerator": gpu("nvidia-gb200", nodes=2), "mode": "QueuedProvisioning"},
        "spec.provisioning.mode",
        "QueuedProvisioning is not available for nvidia-gb200",
    ),
    (
        "slices-on-single-host-2x2",
        {"accelerator": tpu("v6e", "2x2", slices=2), "mode": "FlexStart"},
        "spec.accelerator.tpu.slices",
        "need a multi-host slice",
    ),
    (
        "slices-on-single-host-2x4-8t",
        {"accelerator": tpu("v5e", "2x4", "ct5lp-hightpu-8t", slices=4), "mode": "Spot"},
        "spec.accelerator.tpu.slices",
        "need a multi-host slice",
    ),
    (
        "slices-on-single-host-1x1x1",
        {"accelerator": tpu("tpu7x", "1x1x1", slices=2), "mode": "Spot"},
        "spec.accelerator.tpu.slices",
        "need a multi-host slice",
    ),
    (
        "slices-existing-pool",
        {
            "accelerator": tpu("v5p", "2x2x2", slices=2),
            "mode": "Spot",
            "nodePool": {"name": "shared", "existing": True},
        },
        "spec.nodePool.existing",
        "not available with several slices",
    ),
    (
        "slices-pool-name-too-long",
        {"accelerator": tpu("v5p", "2x2x2", slices=2), "nodePool": {"name": "p" * 37}},
        "spec.nodePool.name",
        "with several slices",
    ),
    (
        "slices-queued",
        {"accelerator": tpu("v6e", "4x4", slices=2), "mode": "QueuedProvisioning"},
        "spec.accelerator.tpu.slices",
        "not available with QueuedProvisioning",
    ),
    (
        "tpu-v4-flex",
        {"accelerator": tpu("v4", "2x2x2"), "mode": "FlexStart"},
        "spec.provisioning.mode",
        "FlexStart is not available for TPU v4: flex-start VMs do not serve it",
    ),
    (
        "gb200-flex",
        {"accelerator": gpu("nvidia-gb200"), "mode": "FlexStart"},
        "spec.provisioning.mode",
        "FlexStart is not available for nvidia-gb200",
    ),
    (
        "tpu-machine-wrong-generation",
        {"accelerator": tpu("v6e", "4x4", "ct5lp-hightpu-4t"), "mode": "Spot"},
        "spec.accelerator.tpu.machineType",
        "does not carry TPU v6e",
    ),
    (
        "tpu-machine-gpu-type",
        {"accelerator": tpu("v5e", "2x2", "a3-highgpu-8g"), "mode": "Spot"},
        "spec.accelerator.tpu.machineType",
        "does not carry TPU v5e",
    ),
    (
        "tpu-chips-do-not-divide",
        {"accelerator": tpu("v6e", "2x2", "ct6e-standard-8t"), "mode": "Spot"},
        "spec.accelerator.tpu.machineType",
        "not a multiple of the 8 chips",
    ),
    (
        "tpu-1x1-on-4t",
        {"accelerator": tpu("v5e", "1x1", "ct5lp-hightpu-4t"), "mode": "Spot"},
        "spec.accelerator.tpu.machineType",
        "not a multiple of the 4 chips",
    ),
    (
        "tpu-8t-beyond-one-vm",
        {"accelerator": tpu("v6e", "4x4", "ct6e-standard-8t"), "mode": "Spot"},
        "spec.accelerator.tpu.machineType",
        "cannot host topology 4x4",
    ),
    (
        "tpu-1t-multi-chip",
        {"accelerator": tpu("v6e", "2x2", "ct6e-standard-1t"), "mode": "Spot"},
        "spec.accelerator.tpu.machineType",
        "cannot host topology 2x2",
    ),
    (
        "tpu7x-1t-2x2x1",
        {"accelerator": tpu("tpu7x", "2x2x1", "tpu7x-standard-1t"), "mode": "Spot"},
        "spec.accelerator.tpu.machineType",
        "cannot host topology 2x2x1",
    ),
    (
        "v6e-3d",
        {"accelerator": tpu("v6e", "4x4x4"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "not valid for TPU v6e",
    ),
    (
        "v6e-unlisted",
        {"accelerator": tpu("v6e", "4x2"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "not valid for TPU v6e",
    ),
    (
        "v6e-too-big",
        {"accelerator": tpu("v6e", "16x32"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "not valid for TPU v6e",
    ),
    (
        "v4-2d",
        {"accelerator": tpu("v4", "4x4"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "not valid for TPU v4",
    ),
    (
        "v4-side-not-multiple",
        {"accelerator": tpu("v4", "4x4x6"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "not valid for TPU v4",
    ),
    (
        "v4-side-over-256",
        {"accelerator": tpu("v4", "4x4x260"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "not valid for TPU v4",
    ),
    (
        "v4-too-many-cubes",
        {"accelerator": tpu("v4", "8x8x68"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "at most 64 cubes",
    ),
    (
        "v5p-unsorted",
        {"accelerator": tpu("v5p", "8x4x4"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "A<=B<=C",
    ),
    (
        "v5p-too-many-cubes",
        {"accelerator": tpu("v5p", "4x4x564"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "at most 140 cubes",
    ),
    (
        "tpu7x-unsorted",
        {"accelerator": tpu("tpu7x", "8x4x4"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "A<=B<=C",
    ),
    (
        "tpu7x-too-many-cubes",
        {"accelerator": tpu("tpu7x", "4x4x580"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "at most 144 cubes",
    ),
    (
        "v5e-1x1x1",
        {"accelerator": tpu("v5e", "1x1x1"), "mode": "Spot"},
        "spec.accelerator.tpu.topology",
        "not valid for TPU v5e",
    ),
    (
        "gpu-machine-mismatch",
        {"accelerator": gpu("nvidia-h100-80gb", machine_type="a2-highgpu-8g"), "mode": "Spot"},
        "spec.accelerator.gpu.machineType",
        "does not carry nvidia-h100-80gb",
    ),
    (
        "gpu-machine-tpu-type",
        {"accelerator": gpu("nvidia-l4", machine_type="ct6e-standard-4t"), "mode": "Spot"},
        "spec.accelerator.gpu.machineType",
        "does not carry nvidia-l4",
    ),
    (
        "gpu-count-vs-machine",
        {
            "accelerator": gpu("nvidia-h100-80gb", machine_type="a3-highgpu-8g", count=4),
            "mode": "Spot",
        },
        "spec.accelerator.gpu.count",
        "has 8 GPUs per VM, not 4",
    ),
    (
        "gpu-count-unavailable",
        {"accelerator": gpu("nvidia-h200-141gb", count=4), "mode": "Spot"},
        "spec.accelerator.gpu.count",
        "no nvidia-h200-141gb machine type has 4",
    ),
    (
        "run-over-7-days",
        {"accelerator": tpu("v6e", "4x4"), "provisioning": {"maxRunDuration": "169h"}},
        "spec.provisioning.maxRunDuration",
        "at most 168h",
    ),
    (
        "run-over-7-days-in-minutes",
        {"accelerator": tpu("v6e", "4x4"), "provisioning": {"maxRunDuration": "10081m"}},
        "spec.provisioning.maxRunDuration",
        "at most 168h",
    ),
    (
        "run-zero",
        {"accelerator": tpu("v6e", "4x4"), "provisioning": {"maxRunDuration": "0s"}},
        "spec.provisioning.maxRunDuration",
        "more than 0s",
    ),
    (
        "reservation-without-name",
        {"accelerator": tpu("v6e", "4x4"), "mode": "Reservation"},
        "spec.provisioning.reservation",
        "required when mode is Reservation",
    ),
    (
        "reservation-name-without-mode",
        {"accelerator": tpu("v6e", "4x4"), "provisioning": {"reservation": "r1"}},
        "spec.provisioning.reservation",
        "only allowed when mode is Reservation",
    ),
    (
        "existing-without-name",
        {"accelerator": tpu("v6e", "4x4"), "nodePool": {"existing": True}},
        "spec.nodePool.name",
        "required when existing is true",
    ),
    (
        "existing-delete",
        {
            "accelerator": tpu("v6e", "4x4"),
            "nodePool": {"existing": True, "name": "pool-a", "cleanup": "Delete"},
        },
        "spec.nodePool.cleanup",
        "never deletes a pool it did not create",
    ),
    (
        "ladder-reservation-missing",
        {"accelerator": tpu("v6e", "4x4"), "provisioning": {"fallback": [{"mode": "Reservation"}]}},
        "spec.provisioning.fallback[0].reservation",
        "required when mode is Reservation",
    ),
    (
        "ladder-reservation-not-reservation",
        {
            "accelerator": tpu("v6e", "4x4"),
            "provisioning": {
                "fallback": [{"mode": "OnDemand"}, {"mode": "Spot", "reservation": "r"}]
            },
        },
        "spec.provisioning.fallback[1].reservation",
        "only allowed when mode is Reservation",
    ),
    (
        "ladder-first-step-waits-forever",
        {
            "accelerator": tpu("v6e", "4x4"),
            "provisioning": {"maxWaitDuration": "0s", "fallback": [{"mode": "Spot"}]},
        },
        "spec.provisioning.maxWaitDuration",
        "only the last step may wait forever",
    ),
    (
        "ladder-on-existing-pool",
        {
            "accelerator": tpu("v6e", "4x4"),
            "provisioning": {"fallback": [{"mode": "Spot"}]},
            "nodePool": {"existing": True, "name": "pool-a"},
        },
        "spec.provisioning.fallback",
        "every step gets a node pool of its own",
    ),
    (
        "ladder-pool-name-too-long",
        {
            "accelerator": tpu("v6e", "4x4"),
            "provisioning": {"fallback": [{"mode": "Spot"}]},
            "nodePool": {"name": "p" * 38},
        },
        "spec.nodePool.name",
        "at most 37 characters with fallback steps",
    ),
    # DWS Calendar mode: what Compute books in calendar mode.
    (
        "calendar-without-its-block",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"]},
        },
        "spec.provisioning.calendar",
        "required when mode is Calendar",
    ),
    (
        "calendar-block-in-another-mode",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "OnDemand",
            "provisioning": {"calendar": BLOCK},
        },
        "spec.provisioning.calendar",
        "not allowed otherwise",
    ),
    (
        "calendar-two-zones",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a", "us-east5-b"], "calendar": BLOCK},
        },
        "spec.provisioning.zones",
        "exactly one zone",
    ),
    (
        "calendar-start-and-earliest",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": {**BLOCK, **WINDOW}},
        },
        "spec.provisioning.calendar.startTime",
        "set startTime, or earliest and latest",
    ),
    (
        "calendar-no-start",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": {"duration": "72h"}},
        },
        "spec.provisioning.calendar.startTime",
        "set startTime, or earliest and latest",
    ),
    (
        "calendar-earliest-alone",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {
                "zones": ["us-east5-a"],
                "calendar": {"earliest": WINDOW["earliest"], "duration": "72h"},
            },
        },
        "spec.provisioning.calendar.latest",
        "earliest and latest go together",
    ),
    (
        "calendar-latest-before-earliest",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {
                "zones": ["us-east5-a"],
                "calendar": {
                    "earliest": WINDOW["latest"],
                    "latest": WINDOW["earliest"],
                    "duration": "72h",
                },
            },
        },
        "spec.provisioning.calendar.latest",
        "at or after earliest",
    ),
    (
        "calendar-window-past-what-the-advice-sees",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {
                "zones": ["us-east5-a"],
                "calendar": {
                    "earliest": WINDOW["earliest"],
                    "latest": "2030-06-01T00:00:00Z",
                    "duration": "72h",
                },
            },
        },
        "spec.provisioning.calendar.latest",
        "at most 120 days after it",
    ),
    (
        "calendar-half-a-day",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": {**BLOCK, "duration": "12h"}},
        },
        "spec.provisioning.calendar.duration",
        "1 to 90 days",
    ),
    (
        "calendar-91-days",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": {**BLOCK, "duration": "2184h"}},
        },
        "spec.provisioning.calendar.duration",
        "1 to 90 days",
    ),
    (
        "calendar-stop-longer-than-a-day",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": {**BLOCK, "stopBefore": "25h"}},
        },
        "spec.provisioning.calendar.stopBefore",
        "at most 24h",
    ),
    (
        "calendar-81-gpu-vms",
        {
            "accelerator": gpu("nvidia-h100-80gb", nodes=81),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": BLOCK},
        },
        "spec.accelerator.gpu.nodes",
        "at most 80",
    ),
    (
        "calendar-v6e-where-not-served",
        {
            "accelerator": tpu("v6e", "4x4"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-central1-a"], "calendar": BLOCK},
        },
        "spec.provisioning.zones",
        "books TPU v6e in asia-northeast1-b, europe-west4-a, us-east5-a, us-east5-b",
    ),
    (
        "calendar-v5p-192-chips",
        {
            "accelerator": tpu("v5p", "4x4x12"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": BLOCK},
        },
        "spec.accelerator.tpu.topology",
        "is 192 chips",
    ),
    (
        "calendar-two-slices",
        {
            "accelerator": tpu("v6e", "4x4", slices=2),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": BLOCK},
        },
        "spec.provisioning.mode",
        "one slice on a node pool of its own",
    ),
    (
        "estimated-order-without-fallback",
        {"accelerator": tpu("v6e", "4x4"), "provisioning": {"fallbackOrder": "Estimated"}},
        "spec.provisioning.fallbackOrder",
        "it needs fallback steps",
    ),
    (
        "estimated-order-calendar",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {
                "zones": ["us-east5-a"],
                "calendar": BLOCK,
                "fallbackOrder": "Estimated",
                "fallback": [{"mode": "Spot"}],
            },
        },
        "spec.provisioning.fallbackOrder",
        "always the first step",
    ),
    (
        "run-too-long",
        {"accelerator": gpu("nvidia-h100-80gb"), "run": {"duration": "2161h"}},
        "spec.run.duration",
        "at most 2160h",
    ),
    (
        "run-stop-before-zero",
        {"accelerator": gpu("nvidia-h100-80gb"), "run": {"duration": "400h", "stopBefore": "0s"}},
        "spec.run.stopBefore",
        "more than 0s",
    ),
    (
        "run-request-ahead-two-days",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "run": {"duration": "400h", "requestAhead": "48h"},
        },
        "spec.run.requestAhead",
        "at most 24h",
    ),
    (
        "run-stop-before-longer-than-window",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "provisioning": {"maxRunDuration": "2h"},
            "run": {"duration": "10h", "stopBefore": "3h"},
        },
        "spec.run.stopBefore",
        "shorter than provisioning.maxRunDuration",
    ),
    (
        "run-too-many-segments",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "provisioning": {"maxRunDuration": "1h"},
            "run": {"duration": "100h"},
        },
        "spec.run.duration",
        "more than 30 segments",
    ),
    (
        "run-segments-on-existing-pool",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "nodePool": {"name": "mine", "existing": True},
            "run": {"duration": "400h"},
        },
        "spec.run.duration",
        "every segment gets a node pool of its own",
    ),
    (
        "run-segments-calendar",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "Calendar",
            "provisioning": {"zones": ["us-east5-a"], "calendar": BLOCK},
            "run": {"duration": "400h"},
        },
        "spec.run.duration",
        "book a longer block",
    ),
    (
        "run-pool-name-without-room",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "nodePool": {"name": "p" * 37},
            "run": {"duration": "400h"},
        },
        "spec.nodePool.name",
        "each segment's pool adds -r<segment>",
    ),
]

#: Ladders whose broken step only the whole spec shows (the accelerator decides): the
#: API server names the list in its cause and the step and field in its message.
INVALID_STEPS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "ladder-tpu-two-zones",
        {
            "accelerator": tpu("v6e", "4x4"),
            "mode": "FlexStart",
            "provisioning": {"fallback": [{"mode": "Spot", "zones": ["us-east5-a", "us-east5-b"]}]},
        },
        "spec.provisioning.fallback[0].zones",
        "a TPU node pool lives in one zone",
    ),
    (
        "ladder-v4-flex-start",
        {
            "accelerator": tpu("v4", "2x2x1"),
            "mode": "Spot",
            "provisioning": {"fallback": [{"mode": "OnDemand"}, {"mode": "FlexStart"}]},
        },
        "spec.provisioning.fallback[1].mode",
        "not available for TPU v4",
    ),
    (
        "ladder-gb200-queued",
        {
            "accelerator": gpu("nvidia-gb200", nodes=2),
            "mode": "OnDemand",
            "provisioning": {"fallback": [{"mode": "QueuedProvisioning"}]},
        },
        "spec.provisioning.fallback[0].mode",
        "not available for nvidia-gb200",
    ),
    (
        "ladder-slices-queued",
        {
            "accelerator": tpu("v6e", "4x4", slices=2),
            "provisioning": {"fallback": [{"mode": "Spot"}, {"mode": "QueuedProvisioning"}]},
        },
        "spec.provisioning.fallback[1].mode",
        "one slice per ProvisioningRequest",
    ),
    (
        "ladder-middle-step-waits-forever",
        {
            "accelerator": tpu("v6e", "4x4"),
            "provisioning": {
                "fallback": [
                    {"mode": "Spot"},
                    {"mode": "Spot", "maxWaitDuration": "0s"},
                    {"mode": "OnDemand"},
                ]
            },
        },
        "spec.provisioning.fallback[1].maxWaitDuration",
        "only the last step may wait forever",
    ),
    (
        "ladder-calendar-as-a-fallback",
        {
            "accelerator": gpu("nvidia-h100-80gb"),
            "mode": "FlexStart",
            "provisioning": {
                "zones": ["us-east5-a"],
                "fallback": [{"mode": "Calendar", "maxWaitDuration": "1h"}],
            },
        },
        "spec.provisioning.fallback[0].mode",
        "only the first step",
    ),
]

#: Reservation references the field's pattern refuses (in pydantic and in the CRD):
#: (case, value). Blocks and sub-blocks are Compute resource names under fixed
#: collection names, in that order, below a reservation.
MALFORMED_RESERVATIONS: list[tuple[str, str]] = [
    ("block-empty", "r1/reservationBlocks/"),
    ("block-collection-singular", "r1/reservationBlock/b1"),
    ("block-collection-case", "r1/ReservationBlocks/b1"),
    ("block-name-uppercase", "r1/reservationBlocks/Block-1"),
    ("block-name-underscore", "r1/reservationBlocks/b_1"),
    ("block-name-trailing-hyphen", "r1/reservationBlocks/b1-"),
    ("block-without-reservation", "reservationBlocks/b1"),
    ("sub-block-without-block", "r1/reservationSubBlocks/s1"),
    ("sub-block-empty", "r1/reservationBlocks/b1/reservationSubBlocks/"),
    ("sub-block-collection-singular", "r1/reservationBlocks/b1/reservationSubBlock/s1"),
    ("below-sub-block", "r1/reservationBlocks/b1/reservationSubBlocks/s1/x"),
    ("block-trailing-slash", "r1/reservationBlocks/b1/"),
    ("shared-block-project-too-short", "projects/p/reservations/r1/reservationBlocks/b1"),
    ("shared-block-zone-path", "projects/my-proj/zones/us-east5-a/reservations/r1"),
    ("block-too-long", "r1/reservationBlocks/" + "b" * 64),
]

#: Reservation references GKE takes as `--reservation` (and as the reservation
#: affinity's value): a reservation, a shared one, one block of either, one sub-block.
VALID_RESERVATIONS: list[str] = [
    "r1",
    "projects/my-proj/reservations/r1",
    "r1/reservationBlocks/r1-block-0001",
    "projects/my-proj/reservations/r1/reservationBlocks/b1",
    "r1/reservationBlocks/b1/reservationSubBlocks/sb-7",
    "projects/my-proj/reservations/r1/reservationBlocks/b1/reservationSubBlocks/sb-7",
    "projects/my-proj/reservations/"
    + "r" * 63
    + "/reservationBlocks/"
    + "b" * 63
    + "/reservationSubBlocks/"
    + "s" * 63,
]
