"""A step's provisioning: its zones and reservation (checked on every step of the
ladder), and the first step's window and calendar block (`validation.calendar`)."""

from __future__ import annotations

from datetime import timedelta

from dws_operator.api import TrainingRequestSpec
from dws_operator.catalog import MAX_RUN_DURATION_SECONDS, ProvisioningMode
from dws_operator.durations import parse_duration
from dws_operator.errors import SpecError
from dws_operator.validation.calendar import calendar_errors
from dws_operator.validation.paths import PROVISIONING_PATH


def reservation_errors(spec: TrainingRequestSpec, path: str) -> list[SpecError]:
    provisioning = spec.provisioning
    is_reservation = provisioning.mode == ProvisioningMode.RESERVATION
    if is_reservation and provisioning.reservation is None:
        return [SpecError(f"{path}.reservation", "required when mode is Reservation")]
    if not is_reservation and provisioning.reservation is not None:
        return [
            SpecError(
                f"{path}.reservation",
                f"only allowed when mode is Reservation, not {provisioning.mode}",
            )
        ]
    return []


#: A TPU node pool lives in one zone: xpk creates each with `--node-locations=ZONE`, and
#: GKE checks a multi-host slice against the per-zone limits of its pool (zones.py).
TPU_ONE_ZONE = "a TPU node pool lives in one zone: name at most one"


def tpu_zone_errors(spec: TrainingRequestSpec, path: str) -> list[SpecError]:
    zones = spec.provisioning.zones or ()
    if spec.accelerator.tpu is not None and len(zones) > 1:
        return [SpecError(f"{path}.zones", f"{TPU_ONE_ZONE}, got {len(zones)}")]
    return []


def provisioning_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    provisioning = spec.provisioning
    found = tpu_zone_errors(spec, PROVISIONING_PATH)
    found += reservation_errors(spec, PROVISIONING_PATH)
    found += calendar_errors(spec)
    run = parse_duration(provisioning.max_run_duration)
    if not timedelta(0) < run <= timedelta(seconds=MAX_RUN_DURATION_SECONDS):
        found.append(
            SpecError(
                f"{PROVISIONING_PATH}.maxRunDuration",
                f"{provisioning.max_run_duration} is out of range; must be more than 0s and "
                "at most 168h (7 days)",
            )
        )
    return found
