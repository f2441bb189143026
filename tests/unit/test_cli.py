"""`dws-operator plan` and `dws-operator crd` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dws_operator.cli import main
from dws_operator.crd import render_crd_yaml, render_policy_crd_yaml

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_v6e_4x4_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--tpu", "v6e", "--topology", "4x4", "-o", "json")
    assert (code, err) == (0, "")
    plan = json.loads(out)
    assert plan["machineType"] == "ct6e-standard-4t"
    assert (plan["nodes"], plan["chipsPerNode"], plan["totalChips"]) == (4, 4, 16)
    assert plan["acceleratorLabel"] == "tpu-v6e-slice"
    assert plan["singleHost"] is False
    assert plan["resourceName"] == "google.com/tpu"
    assert plan["nodeSelector"]["cloud.google.com/gke-flex-start"] == "true"
    assert plan["tolerations"] == [
        {"key": "google.com/tpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert plan["nodePool"]["flexStart"] is True
    assert plan["nodePool"]["autoscaling"]["maxNodeCount"] == 4


def test_gpu_json_with_count(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "plan", "--gpu", "nvidia-h100-80gb", "--nodes", "2", "--count", "4", "-o", "json"
    )
    plan = json.loads(out)
    assert code == 0
    assert (plan["machineType"], plan["nodes"], plan["totalChips"]) == ("a3-highgpu-4g", 2, 8)


def test_table_is_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--tpu", "v5p", "--topology", "2x2x4", "--mode", "Spot")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("Accelerator")
    value_column = {len(line) - len(line[line.index("  ") :].lstrip()) for line in lines}
    assert len(value_column) == 1, out
    assert "4 x 4 chips = 16 chips (multi-host)" in out
    assert "cloud.google.com/gke-spot=true" in out


@pytest.mark.parametrize(
    ("flags", "version", "note"),
    [
        ([], "DEFAULT", "installed by GKE"),
        (["--gpu-driver", "Latest"], "LATEST", "the newest version"),
        (["--gpu-driver", "Disabled"], "INSTALLATION_DISABLED", "nodes offer no nvidia.com/gpu"),
    ],
)
def test_plan_shows_the_gpu_driver(
    capsys: pytest.CaptureFixture[str], flags: list[str], version: str, note: str
) -> None:
    argv = ["plan", "--gpu", "nvidia-l4", "--nodes", "1", *flags]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    [line] = [line for line in out.splitlines() if "GPU driver" in line]
    assert f"GPU driver {version} (" in line
    assert note in line
    code, out, _ = run(capsys, *argv, "-o", "json")
    assert json.loads(out)["nodePool"]["gpuDriverVersion"] == version


def test_plan_targets_a_reservation_block(capsys: pytest.CaptureFixture[str]) -> None:
    block = "projects/my-proj/reservations/r1/reservationBlocks/b1"
    argv = ["plan", "--gpu", "nvidia-b200", "--nodes", "2", "--mode", "Reservation"]
    code, out, _ = run(capsys, *argv, "--reservation", block)
    assert code == 0
    assert f"reservation SPECIFIC_RESERVATION {block}" in out


@pytest.mark.parametrize(
    ("zones", "total", "words"),
    [
        ([], True, "autoscaling 0..2 nodes in all"),
        (["us-east5-a"], False, "autoscaling 0..2 nodes per zone"),
        (["us-east5-a", "us-east5-b"], True, "autoscaling 0..2 nodes in all"),
    ],
)
def test_plan_says_whether_limits_are_per_zone_or_total(
    capsys: pytest.CaptureFixture[str], zones: list[str], total: bool, words: str
) -> None:
    argv = ["plan", "--gpu", "nvidia-h100-80gb", "--nodes", "2", "--mode", "Spot"]
    for zone in zones:
        argv += ["--zone", zone]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert words in out
    code, out, _ = run(capsys, *argv, "-o", "json")
    assert json.loads(out)["nodePool"]["autoscaling"]["total"] is total


def test_tpu_plans_show_no_gpu_driver(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--tpu", "v6e", "--topology", "4x4")
    assert code == 0
    assert "GPU driver" not in out


def test_yaml_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--gpu", "nvidia-l4", "--nodes", "1", "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(out)["machineType"] == "g2-standard-96"


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--tpu", "v9", "--topology", "4x4"], ["--tpu", "spec.accelerator.tpu.version", "v6e"]),
        (["--tpu", "v6e", "--topology", "4x"], ["--topology", "malformed"]),
        (["--tpu", "v6e", "--topology", "4x4x4"], ["--topology", "1x1, 2x2"]),
        (["--tpu", "v6e"], ["--topology", "required"]),
        (["--gpu", "nvidia-l4"], ["--nodes", "required"]),
        (
            ["--tpu", "v4", "--topology", "2x2x2", "--mode", "QueuedProvisioning"],
            ["--mode", "QueuedProvisioning is not available for TPU v4", "allowed: Spot"],
        ),
        (
            ["--tpu", "v6e", "--topology", "2x2", "--slices", "2"],
            ["--slices", "spec.accelerator.tpu.slices", "single VM"],
        ),
        (
            ["--gpu", "nvidia-l4", "--nodes", "2", "--slices", "2"],
            ["--slices", "spec.accelerator.gpu.slices"],
        ),
        (
            [
                "--tpu",
                "v5p",
                "--topology",
                "2x2x2",
                "--slices",
                "2",
                "--mode",
                "QueuedProvisioning",
            ],
            ["--slices", "not available with QueuedProvisioning"],
        ),
        (["--tpu", "v5p", "--topology", "2x2x2", "--slices", "65"], ["--slices", "64"]),
        (["--tpu", "v4", "--topology", "2x2x1"], ["--mode", "TPU v4"]),
        (
            ["--tpu", "v6e", "--topology", "2x2", "--machine-type", "ct6e-standard-8t"],
            ["--machine-type", "allowed: ct6e-standard-4t"],
        ),
        (
            ["--gpu", "nvidia-h100-80gb", "--nodes", "1", "--machine-type", "a2-highgpu-8g"],
            ["--machine-type", "a3-highgpu-8g"],
        ),
        (["--gpu", "nvidia-h100-80gb", "--nodes", "1", "--count", "3"], ["--count", "1, 2, 4, 8"]),
        (["--gpu", "nvidia-x", "--nodes", "1"], ["--gpu", "nvidia-h100-80gb"]),
        (
            ["--gpu", "nvidia-l4", "--nodes", "1", "--gpu-driver", "Newest"],
            ["--gpu-driver", "Default, Latest, Disabled"],
        ),
        (
            ["--tpu", "v6e", "--topology", "4x4", "--gpu-driver", "Latest"],
            ["--gpu-driver", "not with --tpu"],
        ),
        (["--tpu", "v6e", "--topology", "4x4", "--mode", "Reservation"], ["--reservation"]),
        (
            [
                "--tpu",
                "v6e",
                "--topology",
                "4x4",
                "--mode",
                "Reservation",
                "--reservation",
                "r1/reservationBlock/b1",
            ],
            ["--reservation", "malformed", "/reservationBlocks/BLOCK"],
        ),
        (
            ["--tpu", "v6e", "--topology", "4x4", "--max-run-duration", "8d"],
            ["--max-run-duration", "malformed"],
        ),
        (
            ["--tpu", "v6e", "--topology", "4x4", "--max-run-duration", "200h"],
            ["--max-run-duration", "168h"],
        ),
        (["--gpu", "nvidia-l4", "--nodes", "x"], ["--nodes", "invalid int value"]),
        (["--tpu", "v6e", "--gpu", "nvidia-l4"], ["not allowed with"]),
        ([], ["one of the arguments --tpu --gpu -f/--filename is required"]),
    ],
)
def test_invalid_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], names: list[str]
) -> None:
    code, out, err = run(capsys, "plan", *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    for name in names:
        assert name in err


def test_plan_from_manifest_derives_the_pool_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = yaml.safe_load((ROOT / "manifests/samples/tpu-v6e-flex-start.yaml").read_text())
    manifest["metadata"]["uid"] = "0f6c2c35-3b1e-4f9a-9c55-6a0d7e3b8a11"
    path = tmp_path / "tr.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, out, _ = run(capsys, "plan", "-f", str(path), "-o", "json")
    plan = json.loads(out)
    assert code == 0
    assert plan["nodePool"]["name"].startswith("dws-llama-v6e-4x4-")
    assert plan["nodeSelector"]["cloud.google.com/gke-nodepool"] == plan["nodePool"]["name"]
    assert plan["maxWaitSeconds"] == 6 * 3600


def test_plan_from_bad_manifest(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "tr.yaml"
    path.write_text("spec:\n  accelerator: {tpu: {version: v6e, topology: 4x4}}\n")
    code, _, err = run(capsys, "plan", "-f", str(path))
    assert code == 2
    assert err.strip() == "dws-operator plan: spec.provisioning: Field required"


@pytest.mark.parametrize("sample", sorted((ROOT / "manifests/samples").glob("*.yaml")))
def test_every_sample_plans(capsys: pytest.CaptureFixture[str], sample: Path) -> None:
    code, out, err = run(capsys, "plan", "-f", str(sample), "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["nodes"] >= 1


def test_crd_command_prints_the_generated_crd(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "crd")
    assert code == 0
    assert out == render_crd_yaml()
    code, out, _ = run(capsys, "crd", "--policy")
    assert code == 0
    assert out == render_policy_crd_yaml()
    assert "kind: TrainingPolicy" in out


def test_console_entry_point() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dws_operator",
            "plan",
            "--tpu",
            "v5e",
            "--topology",
            "1x1",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["machineType"] == "ct5lp-hightpu-1t"


def test_plan_prints_the_ladder(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--tpu", "v6e", "--topology", "4x4", "--zone", "us-east5-a"]
    argv += ["--max-wait-duration", "30m", "--fallback", "FlexStart,zone=us-east5-b,wait=20m"]
    argv += ["--fallback", "Spot", "--node-pool", "train"]
    code, out, err = run(capsys, *argv, "-o", "json")
    assert (code, err) == (0, "")
    ladder = json.loads(out)["ladder"]
    assert [
        (s["step"], s["maxWaitSeconds"], s["nodePool"]["name"], s["nodePool"]["mode"])
        for s in ladder
    ] == [
        (1, 1800, "train", "FlexStart"),
        (2, 1200, "train-f1", "FlexStart"),
        (3, 1800, "train-f2", "Spot"),
    ]
    assert [s["nodePool"]["zones"] for s in ladder] == [["us-east5-a"], ["us-east5-b"], []]
    code, table, _ = run(capsys, *argv)
    assert code == 0
    assert "Step 2 of 3    FlexStart, waits 20m" in table
    assert "Step 3 of 3    Spot, waits 30m" in table
    assert "               zones us-east5-b" in table


def test_plan_of_a_ladder_without_one_has_no_ladder(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--tpu", "v6e", "--topology", "4x4", "-o", "json")
    assert code == 0
    assert "ladder" not in json.loads(out)


@pytest.mark.parametrize(
    ("fallback", "message"),
    [
        (
            "FlexStart",
            "--fallback (spec.provisioning.fallback[0].mode: FlexStart is not available for TPU v4",
        ),
        ("Spot,zone", "--fallback Spot,zone: 'zone' is not one of zone=ZONE"),
    ],
)
def test_plan_refuses_a_bad_fallback_step(
    capsys: pytest.CaptureFixture[str], fallback: str, message: str
) -> None:
    argv = ["plan", "--tpu", "v4", "--topology", "2x2x1", "--mode", "Spot", "--fallback", fallback]
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"dws-operator plan: {message}")


def test_plan_of_the_ladder_sample_names_each_steps_pool(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = yaml.safe_load((ROOT / "manifests/samples/tpu-v6e-ladder.yaml").read_text())
    manifest["metadata"]["uid"] = "0f6c2c35-3b1e-4f9a-9c55-6a0d7e3b8a11"
    path = tmp_path / "tr.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, out, _ = run(capsys, "plan", "-f", str(path), "-o", "json")
    assert code == 0
    names = [s["nodePool"]["name"] for s in json.loads(out)["ladder"]]
    assert names[1:] == [f"{names[0]}-f1", f"{names[0]}-f2"]
    assert len(names[2]) <= 40
