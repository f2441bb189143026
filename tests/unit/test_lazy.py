"""A Compute client connected on first use, once; without credentials, a terminal error."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.auth.exceptions import DefaultCredentialsError

from dws_operator.controller.lazy import OnFirstUse
from dws_operator.gke import GkeError, connect_compute


def test_connects_once_on_first_use() -> None:
    made: list[object] = []

    def connect() -> object:
        made.append(object())
        return made[-1]

    lazy = OnFirstUse(connect)
    assert made == []
    first = lazy.get()
    assert lazy.get() is first
    assert made == [first]
    assert OnFirstUse(None).get() is None


def test_credentials_not_found_are_a_terminal_gke_error() -> None:
    def connect() -> object:
        raise DefaultCredentialsError("no credentials")

    with pytest.raises(GkeError) as raised:
        OnFirstUse(connect).get()
    assert (raised.value.retryable, raised.value.reason) == (False, "ComputeUnavailable")


def test_compute_without_credentials_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Application Default Credentials pointed at a file that is not there: Compute
    # itself (no endpoint) cannot be reached, and the operator says so for good.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(GkeError) as raised:
        OnFirstUse(lambda: connect_compute(None)).get()
    assert (raised.value.retryable, raised.value.reason) == (False, "ComputeUnavailable")
