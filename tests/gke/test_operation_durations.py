"""Operations take GKE's time: simulated durations per method, run `clock_factor` times
faster than real time, from the config file, the CLI, or GKE's preset."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from google.cloud import container_v1
from pydantic import ValidationError

from dws_workshop.cli import emulator as emulator_cli
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    GKE_OPERATION_SECONDS,
    ClusterManagerEmulator,
    EmulatorConfig,
    MethodFaults,
    load_config,
)
from tests.builders import gpu
from tests.gke.harness import Api, ManualClock, rendered, serve

Operation = container_v1.Operation
OPERATIONS = "projects/dws-sandbox/locations/us-east5/operations"
POOL = f"{DEFAULT_CLUSTER}/nodePools/dws-pool"


async def status_of(api: Api, operation: Operation) -> int:
    current = await api.get_operation(name=f"{OPERATIONS}/{operation.name}")
    return int(current.status)


def test_a_simulated_duration_runs_clock_factor_times_faster() -> None:
    """40 simulated seconds at 8x: DONE after 5 real seconds, not before; the pool
    appears only then. A method without a duration keeps its real-seconds latency.
    (Clock steps are binary fractions, so sums land exactly on the boundaries.)"""
    config = EmulatorConfig(
        operation_latency_seconds=2.0,
        clock_factor=8.0,
        operation_durations={"CreateNodePool": 40.0},
    )

    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        pool = rendered(gpu("nvidia-l4", nodes=1, count=1), "Spot", name="dws-pool")
        created = await api.create_node_pool(parent=DEFAULT_CLUSTER, node_pool=pool)
        assert created.status == Operation.Status.PENDING
        # PENDING for the first fifth, as every emulated operation.
        clock.now += 0.5
        assert await status_of(api, created) == Operation.Status.PENDING
        clock.now += 0.5
        assert await status_of(api, created) == Operation.Status.RUNNING
        clock.now += 3.75
        assert await status_of(api, created) == Operation.Status.RUNNING
        running = emulator.node_pool(POOL)
        assert running is not None
        assert running.status == container_v1.NodePool.Status.PROVISIONING
        clock.now += 0.25
        assert await status_of(api, created) == Operation.Status.DONE
        done = emulator.node_pool(POOL)
        assert done is not None
        assert done.status == container_v1.NodePool.Status.RUNNING

        # No duration for deletes: operation_latency_seconds (2 real seconds) holds.
        deleting = await api.delete_node_pool(name=POOL)
        clock.now += 1.75
        assert await status_of(api, deleting) == Operation.Status.RUNNING
        clock.now += 0.25
        assert await status_of(api, deleting) == Operation.Status.DONE
        assert emulator.node_pool(POOL) is None

    serve(config, scenario)


def test_a_duration_wins_over_a_methods_latency() -> None:
    config = EmulatorConfig(
        operation_latency_seconds=100.0,
        clock_factor=2.0,
        faults={"CreateNodePool": MethodFaults(operation_latency_seconds=50.0)},
        operation_durations={"CreateNodePool": 10.0},
    )
    assert config.operation_seconds("CreateNodePool") == 5.0
    assert config.operation_seconds("DeleteNodePool") == 100.0

    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        pool = rendered(gpu("nvidia-l4", nodes=1, count=1), "Spot", name="dws-pool")
        created = await api.create_node_pool(parent=DEFAULT_CLUSTER, node_pool=pool)
        clock.now += 4.5
        assert await status_of(api, created) == Operation.Status.RUNNING
        clock.now += 0.5
        assert await status_of(api, created) == Operation.Status.DONE

    serve(config, scenario)


def test_without_durations_the_latency_fields_hold() -> None:
    config = EmulatorConfig(
        operation_latency_seconds=3.0,
        clock_factor=60.0,
        faults={"DeleteNodePool": MethodFaults(operation_latency_seconds=7.0)},
    )
    assert config.operation_durations == {}
    assert config.operation_seconds("CreateNodePool") == 3.0
    assert config.operation_seconds("DeleteNodePool") == 7.0


def test_the_gke_preset_loads_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "emulator.yaml"
    path.write_text("clock_factor: 60\noperation_durations: gke\n")
    config = load_config(path)
    assert config.operation_durations == GKE_OPERATION_SECONDS
    assert config.operation_durations["CreateNodePool"] == 40.0
    assert config.operation_seconds("CreateNodePool") == pytest.approx(40.0 / 60)
    assert set(GKE_OPERATION_SECONDS) == {
        "CreateNodePool",
        "DeleteNodePool",
        "SetNodePoolAutoscaling",
        "SetNodePoolSize",
        "UpdateNodePool",
    }
    # Per method, in simulated seconds, is the other spelling.
    path.write_text("operation_durations:\n  CreateNodePool: 30\n")
    assert load_config(path).operation_durations == {"CreateNodePool": 30.0}


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        ({"operation_durations": "aws"}, "'aws' is not a preset of operation durations"),
        ({"operation_durations": {"GetNodePool": 1}}, "GetNodePool starts no operation"),
        ({"operation_durations": {"CreateNodePool": -1}}, "greater than or equal to 0"),
        ({"clock_factor": 0}, "greater than 0"),
    ],
)
def test_bad_durations_are_refused(data: dict[str, object], complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        EmulatorConfig.model_validate(data)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dws-operator")
    emulator_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["emulator", *argv])


def test_the_cli_turns_gke_limits_on_over_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "emulator.yaml"
    path.write_text("operation_latency_seconds: 0.01\nclock_factor: 2\napi_rate_limit: 9\n")
    args = parse("--config", str(path), "--operation-durations", "gke", "--clock-factor", "60")
    config = emulator_cli.config_from(args)
    assert config.operation_durations == GKE_OPERATION_SECONDS
    assert config.clock_factor == 60.0
    assert config.api_rate_limit == 9
    assert config.operation_latency_seconds == 0.01
    assert emulator_cli.config_from(parse("--api-rate-limit", "600")).api_rate_limit == 600
    plain = emulator_cli.config_from(parse())
    assert (plain.operation_durations, plain.clock_factor, plain.api_rate_limit) == ({}, 1.0, None)


@pytest.mark.parametrize(
    "argv",
    [
        ("--clock-factor", "0"),
        ("--api-rate-limit", "-5"),
        ("--operation-durations", "aws"),
    ],
)
def test_the_cli_refuses_bad_limits(
    argv: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert argv[0] in capsys.readouterr().err
