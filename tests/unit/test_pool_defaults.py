"""The operator's node settings (DWS_NODE_*): parsed once at start, one clear line for a
bad one, and a warning when the nodes would run as the Compute Engine default account."""

from __future__ import annotations

import logging

import pytest

from dws_operator.controller import ConfigError, OperatorConfig
from dws_operator.controller.runner import warn_about_settings
from dws_operator.gke.pool_defaults import (
    CLOUD_PLATFORM_SCOPE,
    PoolDefaults,
    PoolDefaultsError,
    default_service_account_warning,
    parse_pool_defaults,
)

BASE = {"DWS_GKE_PROJECT": "my-project", "DWS_GKE_LOCATION": "us-east5", "DWS_GKE_CLUSTER": "c1"}
SA = "dws-nodes@my-project.iam.gserviceaccount.com"


def parsed(env: dict[str, str]) -> PoolDefaults:
    return parse_pool_defaults(lambda _key, name: env.get(name))


def test_defaults_are_workload_identity_and_cloud_platform() -> None:
    defaults = OperatorConfig.from_env(BASE).pool_defaults
    assert defaults == PoolDefaults()
    assert defaults.service_account is None
    assert defaults.oauth_scopes == ()
    # No scope is sent for the Compute Engine default account (GKE's defaults apply);
    # the nodes' own account gets cloud-platform, so IAM alone decides.
    assert defaults.scopes == ()
    own = parsed({**BASE, "DWS_NODE_SERVICE_ACCOUNT": "nodes@p.iam.gserviceaccount.com"})
    assert own.scopes == (CLOUD_PLATFORM_SCOPE,)
    assert defaults.workload_metadata == "GKE_METADATA"
    assert (defaults.labels, defaults.tags) == ((), ())
    assert (defaults.disk_type, defaults.disk_size_gb, defaults.image_streaming) == (
        None,
        None,
        False,
    )


def test_every_setting_from_the_environment() -> None:
    config = OperatorConfig.from_env(
        {
            **BASE,
            "DWS_NODE_SERVICE_ACCOUNT": SA,
            "DWS_NODE_OAUTH_SCOPES": (
                "https://www.googleapis.com/auth/devstorage.read_only, "
                "https://www.googleapis.com/auth/logging.write"
            ),
            "DWS_NODE_WORKLOAD_METADATA": "gce_metadata",
            "DWS_NODE_LABELS": "team=ml, cost-center=research,empty=",
            "DWS_NODE_TAGS": "dws-nodes,allow-egress",
            "DWS_NODE_DISK_TYPE": "hyperdisk-balanced",
            "DWS_NODE_DISK_SIZE_GB": "200",
            "DWS_NODE_IMAGE_STREAMING": "True",
        }
    )
    assert config.pool_defaults == PoolDefaults(
        service_account=SA,
        oauth_scopes=(
            "https://www.googleapis.com/auth/devstorage.read_only",
            "https://www.googleapis.com/auth/logging.write",
        ),
        workload_metadata="GCE_METADATA",
        labels=(("cost-center", "research"), ("empty", ""), ("team", "ml")),
        tags=("dws-nodes", "allow-egress"),
        disk_type="hyperdisk-balanced",
        disk_size_gb=200,
        image_streaming=True,
    )


def test_the_flag_wins_over_the_environment() -> None:
    other = "other@my-project.iam.gserviceaccount.com"
    config = OperatorConfig.from_env(
        {**BASE, "DWS_NODE_SERVICE_ACCOUNT": SA}, node_service_account=other
    )
    assert config.pool_defaults.service_account == other


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DWS_NODE_SERVICE_ACCOUNT": "nodes"}, "DWS_NODE_SERVICE_ACCOUNT='nodes' is not valid"),
        ({"DWS_NODE_OAUTH_SCOPES": "cloud-platform"}, "'cloud-platform' is not a scope URL"),
        ({"DWS_NODE_OAUTH_SCOPES": " , "}, "DWS_NODE_OAUTH_SCOPES is empty"),
        ({"DWS_NODE_WORKLOAD_METADATA": "SECURE"}, "use GKE_METADATA (Workload Identity"),
        ({"DWS_NODE_LABELS": "team"}, "'team' is not key=value"),
        ({"DWS_NODE_LABELS": "team=a,team=b"}, "key 'team' is given twice"),
        ({"DWS_NODE_LABELS": "Team=ml"}, "key 'Team' is not valid"),
        ({"DWS_NODE_LABELS": "team=ML!"}, "value 'ML!' of 'team' is not valid"),
        ({"DWS_NODE_LABELS": "dws-operator-dev_uid=x"}, "'dws-operator-dev_uid' is reserved"),
        ({"DWS_NODE_LABELS": "dws-operator-dev_extra=x"}, "are the operator's own"),
        ({"DWS_NODE_TAGS": "ok,Not_OK"}, "'Not_OK' is not a valid network tag"),
        ({"DWS_NODE_TAGS": "a,a"}, "a tag is listed twice"),
        ({"DWS_NODE_DISK_TYPE": "pd-extreme"}, "DWS_NODE_DISK_TYPE='pd-extreme' is not valid"),
        ({"DWS_NODE_DISK_SIZE_GB": "9"}, "DWS_NODE_DISK_SIZE_GB=9 is not valid"),
        ({"DWS_NODE_DISK_SIZE_GB": "big"}, "DWS_NODE_DISK_SIZE_GB='big' is not valid"),
        ({"DWS_NODE_IMAGE_STREAMING": "yes"}, "use true or false"),
    ],
)
def test_bad_node_settings_are_one_clear_line(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        OperatorConfig.from_env({**BASE, **env})
    assert words in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_model_checks_itself() -> None:
    """Built directly (tests, the sandbox) it refuses what the environment would."""
    with pytest.raises(PoolDefaultsError, match="is reserved"):
        PoolDefaults(labels=(("dws-operator-dev_shape", "x"),))
    with pytest.raises(PoolDefaultsError, match="each key once"):
        PoolDefaults(labels=(("b", "1"), ("a", "2")))
    with pytest.raises(PoolDefaultsError, match="GKE boot disks are"):
        PoolDefaults(disk_type="local-ssd")
    assert parsed({}) == PoolDefaults()


def test_a_warning_without_a_node_service_account() -> None:
    warning = default_service_account_warning(PoolDefaults())
    assert warning is not None
    assert "Compute Engine default service account" in warning
    assert "DWS_NODE_SERVICE_ACCOUNT" in warning
    assert default_service_account_warning(PoolDefaults(service_account=SA)) is None


def test_the_operator_warns_at_start(caplog: pytest.LogCaptureFixture) -> None:
    """What run_operator says first (before it connects to anything)."""
    with caplog.at_level(logging.WARNING, logger="dws_operator.controller.runner"):
        warn_about_settings(OperatorConfig.from_env(BASE))
        warn_about_settings(OperatorConfig.from_env({**BASE, "DWS_NODE_SERVICE_ACCOUNT": SA}))
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "nodes run as the Compute Engine default service account" in warning
