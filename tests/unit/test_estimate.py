"""The time-to-capacity estimate: Kaplan-Meier quantiles over waits that got capacity and
waits that ended without it, on hand-worked cases and on simulated histories with a known
median; the bounded history and its ConfigMap form."""

from __future__ import annotations

import math
import random
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from dws_operator.estimate import (
    MAX_KEYS,
    MAX_PER_KEY,
    History,
    Wait,
    capacity_key,
    estimate,
    quantile,
)

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def waits(*rows: tuple[float, bool]) -> list[Wait]:
    return [Wait(seconds, censored, T0) for seconds, censored in rows]


def test_without_censoring_the_quantiles_are_the_waits() -> None:
    seen = waits((1, False), (2, False), (3, False), (4, False))
    assert quantile(seen, 0.5) == 2
    assert quantile(seen, 0.9) == 4


def test_a_wait_that_ended_without_capacity_counts_while_it_lasted() -> None:
    # Worked by hand: S(1) = 3/4; the wait censored at 2 leaves; S(3) = 3/4 * 1/2 = 3/8.
    seen = waits((1, False), (2, True), (3, False), (4, False))
    assert quantile(seen, 0.5) == 3
    assert quantile(seen, 0.9) == 4
    # Dropping the censored wait would say 3 too here, but with it counted as capacity
    # at 2 (the naive mistake) the median would be 2.
    assert quantile(waits((1, False), (2, False), (3, False), (4, False)), 0.5) == 2


def test_too_many_without_capacity_leaves_a_quantile_unknown() -> None:
    seen = waits((10, False), (20, True), (30, True), (40, True))
    assert quantile(seen, 0.5) is None
    found = estimate("k", seen)
    assert (found.observations, found.censored, found.p50, found.p90) == (4, 3, None, None)


def test_no_data_before_the_first_wait() -> None:
    found = History().estimate("tpu-v6e.4x4.x1.FlexStart.us-east5-a")
    assert (found.observations, found.p50, found.p90) == (0, None, None)


def simulated_median_errors(histories: int, asks: int, drop_censored: bool = False) -> list[float]:
    """Signed relative errors of the estimated median over `histories` simulated
    histories of `asks` asks each: capacity comes after a log-normal wait (median one
    hour, sigma 0.4: 90% of asks within 30 minutes and 2 hours), and each ask gives up
    after a maximum wait of its own between 30 minutes and 3 hours (about a quarter give
    up first)."""
    true_median = 3600.0
    errors = []
    for seed in range(histories):
        draw = random.Random(seed)
        seen = []
        for _ in range(asks):
            arrival = true_median * math.exp(draw.gauss(0.0, 0.4))
            give_up = draw.uniform(1800.0, 3 * 3600.0)
            seen.append(Wait(min(arrival, give_up), arrival > give_up, T0))
        if drop_censored:
            seen = [w for w in seen if not w.censored]
        found = quantile(seen, 0.5)
        errors.append(math.inf if found is None else (found - true_median) / true_median)
    return errors


def test_after_20_asks_the_median_is_within_a_quarter_of_the_truth() -> None:
    errors = simulated_median_errors(histories=400, asks=20)
    within = sum(1 for e in errors if abs(e) <= 0.25) / len(errors)
    assert within >= 0.95, within


def test_dropping_the_asks_that_gave_up_would_bias_the_estimate_low() -> None:
    # With many asks the Kaplan-Meier median settles on the truth; the median of the
    # waits that got capacity (the lucky ones) settles below it.
    counted = statistics.mean(simulated_median_errors(histories=100, asks=200))
    dropped = statistics.mean(simulated_median_errors(histories=100, asks=200, drop_censored=True))
    assert abs(counted) < 0.02, counted
    assert dropped < -0.05, dropped


def test_the_history_keeps_the_newest_waits_of_the_newest_keys() -> None:
    history = History()
    for index in range(MAX_PER_KEY + 5):
        history.add("a", Wait(float(index), False, T0 + timedelta(seconds=index)))
    assert [w.seconds for w in history.waits["a"]][:2] == [5.0, 6.0]
    assert len(history.waits["a"]) == MAX_PER_KEY
    for index in range(MAX_KEYS + 3):
        history.add(f"k{index}", Wait(1.0, False, T0 + timedelta(days=1, seconds=index)))
    assert len(history.waits) == MAX_KEYS
    assert "a" not in history.waits  # its newest wait is the oldest of all
    assert f"k{MAX_KEYS + 2}" in history.waits


def test_the_configmap_form_reads_back_and_skips_what_does_not_parse() -> None:
    history = History()
    key = capacity_key("tpu-v6e", "4x4", 1, "FlexStart", "us-east5-a")
    history.add(key, Wait(12.5, False, T0))
    history.add(key, Wait(30.0, True, T0 + timedelta(hours=1)))
    data = history.to_data()
    assert list(data) == [key]
    data["bad.key"] = "not json"
    data["bad/key"] = "[[1,0,0]]"
    back = History.from_data(data)
    assert list(back.waits) == [key]
    assert back.waits[key] == history.waits[key]


@pytest.mark.parametrize(
    ("parts", "key"),
    [
        (("tpu-v6e", "4x4", 1, "FlexStart", "us-east5-a"), "tpu-v6e.4x4.x1.FlexStart.us-east5-a"),
        (("nvidia-h100-80gb", "16 GPUs", 2, "Spot", "any"), "nvidia-h100-80gb.16_GPUs.x2.Spot.any"),
    ],
)
def test_keys_are_configmap_keys(parts: tuple[str, str, int, str, str], key: str) -> None:
    assert capacity_key(*parts) == key
