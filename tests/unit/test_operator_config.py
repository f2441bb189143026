"""Operator settings: environment, flags, and one clear line for a bad one."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from dws_operator.controller import ConfigError, KueueMode, OperatorConfig

BASE = {"DWS_GKE_PROJECT": "my-project", "DWS_GKE_LOCATION": "us-east5", "DWS_GKE_CLUSTER": "c1"}


def test_from_environment() -> None:
    config = OperatorConfig.from_env(
        {
            **BASE,
            "DWS_GKE_ENDPOINT": "127.0.0.1:8470",
            "DWS_KUEUE": "Required",
            "DWS_DEFAULT_QUEUE": "dws-queue",
            "DWS_QUEUED_QUEUE": "dws-queued",
            "DWS_NAMESPACES": "team-a, team-b",
            "DWS_RUNNING_POLL_SECONDS": "60",
            "DWS_COMPUTE_ENDPOINT": "http://127.0.0.1:8471",
        }
    )
    assert config.compute_endpoint == "http://127.0.0.1:8471"
    assert config.queued_queue == "dws-queued"
    assert config.running_poll_seconds == 60.0
    assert config.cluster_path == "projects/my-project/locations/us-east5/clusters/c1"
    assert config.gke_endpoint == "127.0.0.1:8470"
    assert config.kueue == KueueMode.REQUIRED
    assert config.default_queue == "dws-queue"
    assert config.namespaces == ("team-a", "team-b")


def test_defaults() -> None:
    config = OperatorConfig.from_env(BASE)
    assert (config.kueue, config.gke_endpoint, config.default_queue, config.namespaces) == (
        KueueMode.AUTO,
        None,
        None,
        (),
    )
    assert config.running_poll_seconds == 300.0


def test_flags_win_over_environment() -> None:
    config = OperatorConfig.from_env(BASE, cluster="c2", kueue="disabled", location=None)
    assert (config.cluster, config.kueue, config.location) == (
        "c2",
        KueueMode.DISABLED,
        "us-east5",
    )


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({k: v for k, v in BASE.items() if k != "DWS_GKE_PROJECT"}, "DWS_GKE_PROJECT is not set"),
        ({k: v for k, v in BASE.items() if k != "DWS_GKE_CLUSTER"}, "DWS_GKE_CLUSTER is not set"),
        ({**BASE, "DWS_GKE_PROJECT": "X"}, "DWS_GKE_PROJECT='X' is not valid"),
        ({**BASE, "DWS_GKE_LOCATION": "moon"}, "DWS_GKE_LOCATION='moon' is not valid"),
        ({**BASE, "DWS_GKE_CLUSTER": "Bad_Name"}, "DWS_GKE_CLUSTER='Bad_Name' is not valid"),
        ({**BASE, "DWS_GKE_ENDPOINT": "nohostport"}, "DWS_GKE_ENDPOINT='nohostport'"),
        ({**BASE, "DWS_COMPUTE_ENDPOINT": "127.0.0.1:1"}, "DWS_COMPUTE_ENDPOINT='127.0.0.1:1'"),
        ({**BASE, "DWS_KUEUE": "maybe"}, "use auto, required or disabled"),
        ({**BASE, "DWS_DEFAULT_QUEUE": "Q!"}, "DWS_DEFAULT_QUEUE='Q!' is not valid"),
        ({**BASE, "DWS_QUEUED_QUEUE": "Q?"}, "DWS_QUEUED_QUEUE='Q?' is not valid"),
        ({**BASE, "DWS_NAMESPACES": "ok,NOT OK"}, "DWS_NAMESPACES='NOT OK' is not valid"),
        ({**BASE, "DWS_RUNNING_POLL_SECONDS": "soon"}, "expected seconds from 1 to 3600"),
        ({**BASE, "DWS_RUNNING_POLL_SECONDS": "0.1"}, "DWS_RUNNING_POLL_SECONDS='0.1'"),
        ({**BASE, "DWS_RUNNING_POLL_SECONDS": "nan"}, "DWS_RUNNING_POLL_SECONDS='nan'"),
        ({**BASE, "DWS_CAPACITY_HISTORY": "Not_A_Name"}, "DWS_CAPACITY_HISTORY='Not_A_Name'"),
    ],
)
def test_bad_settings_are_one_clear_line(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        OperatorConfig.from_env(env)
    assert words in str(raised.value)
    assert "\n" not in str(raised.value)


def test_run_refuses_to_start_without_settings() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dws_operator", "run"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "dws-operator run: DWS_GKE_PROJECT is not set; set it (or pass --project) to the GKE "
        "cluster's value"
    )


def test_leader_election_is_off_unless_asked() -> None:
    config = OperatorConfig.from_env(BASE)
    assert config.lease is None
    assert config.lease_settings() is None


def test_leader_election_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "dws-operator-7d9f-abcde")
    config = OperatorConfig.from_env(
        {
            **BASE,
            "DWS_LEADER_ELECT": "True",
            "DWS_LEASE_NAME": "dws",
            "DWS_LEASE_DURATION_SECONDS": "30",
            "DWS_LEASE_RENEW_DEADLINE_SECONDS": "20",
            "DWS_LEASE_RETRY_PERIOD_SECONDS": "4",
        },
        lease_namespace="ops",
    )
    settings = config.lease_settings()
    assert settings is not None
    assert (settings.namespace, settings.name) == ("ops", "dws")
    assert (settings.duration, settings.renew_deadline, settings.retry_period) == (30, 20, 4)
    # One candidate per process: a restarted container is a new one.
    assert settings.identity.startswith("dws-operator-7d9f-abcde_")
    again = config.lease_settings()
    assert again is not None
    assert again.identity != settings.identity


def test_leader_election_defaults_are_client_gos(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "dws-system")
    settings = OperatorConfig.from_env({**BASE, "DWS_LEADER_ELECT": "true"}).lease_settings()
    assert settings is not None
    assert (settings.namespace, settings.name) == ("dws-system", "dws-operator")
    assert (settings.duration, settings.renew_deadline, settings.retry_period) == (15, 10, 2)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DWS_LEADER_ELECT": "yes"}, "DWS_LEADER_ELECT='yes'"),
        (
            {"DWS_LEADER_ELECT": "true", "DWS_LEASE_RENEW_DEADLINE_SECONDS": "15"},
            "must be longer than the renew deadline",
        ),
        (
            {"DWS_LEADER_ELECT": "true", "DWS_LEASE_RETRY_PERIOD_SECONDS": "9"},
            "1.2 x the retry period",
        ),
        ({"DWS_LEADER_ELECT": "true", "DWS_LEASE_NAME": "Bad_Name"}, "DWS_LEASE_NAME"),
        ({"DWS_LEADER_ELECT": "true", "DWS_LEASE_DURATION_SECONDS": "x"}, "expected seconds"),
    ],
)
def test_bad_leader_election_settings(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        OperatorConfig.from_env({**BASE, **env})


def test_metrics_are_on_by_default_and_logs_are_text() -> None:
    config = OperatorConfig.from_env(BASE)
    assert (config.metrics_port, config.metrics_address, config.log_format) == (
        8081,
        "0.0.0.0",
        "text",
    )
    off = OperatorConfig.from_env({**BASE, "DWS_METRICS_PORT": "0"})
    assert off.metrics_port is None
    flags = OperatorConfig.from_env(BASE, metrics_port="9100", log_format="JSON")
    assert (flags.metrics_port, flags.log_format) == (9100, "json")


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DWS_METRICS_PORT": "http"}, "DWS_METRICS_PORT='http' is not valid"),
        ({"DWS_METRICS_PORT": "70000"}, "expected a whole number 0-65535"),
        ({"DWS_METRICS_ADDRESS": "localhost"}, "expected an IP address"),
        ({"DWS_LOG_FORMAT": "yaml"}, "DWS_LOG_FORMAT='yaml' is not valid; use text or json"),
    ],
)
def test_bad_metrics_and_log_settings(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        OperatorConfig.from_env({**BASE, **env})


def test_the_capacity_history_is_a_configmap_unless_kept_in_memory() -> None:
    assert OperatorConfig.from_env(BASE).capacity_history == "dws-operator-capacity-history"
    named = OperatorConfig.from_env({**BASE, "DWS_CAPACITY_HISTORY": "ml-waits"})
    assert named.capacity_history == "ml-waits"
    assert OperatorConfig.from_env({**BASE, "DWS_CAPACITY_HISTORY": "-"}).capacity_history is None
    # Built in code (tests, the sandbox): in memory unless said otherwise.
    assert OperatorConfig(project="p", location="us-east5", cluster="c").capacity_history is None
