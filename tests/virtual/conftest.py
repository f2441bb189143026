from __future__ import annotations

import logging

import pytest

from tests.virtual.harness import Virtual


@pytest.fixture(autouse=True)
def operator_log(caplog: pytest.LogCaptureFixture) -> None:
    """The operator's own log lines are shown with a failed test."""
    caplog.set_level(logging.INFO, logger="dws_operator")


@pytest.fixture
def virtual() -> Virtual:
    return Virtual()
