"""JobSetManager's lifecycle: it stops with its context, and a manager that cannot start
fails at once with its log, leaving no process and no work directory behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dws_workshop.devcluster import DevCluster
from dws_workshop.devcluster.jobset import JobSetError, JobSetManager
from tests.polling import eventually


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (ProcessLookupError, FileNotFoundError):
        return True
    # A zombie is gone for our purposes.
    return state == "Z"


def test_stop_leaves_nothing_behind(jobset_cluster: DevCluster) -> None:
    manager = JobSetManager(jobset_cluster.kubeconfig)
    with manager:
        pid = manager.pid
        assert pid is not None
        assert manager.ready()
        workdir = manager.workdir
    assert manager.pid is None
    assert eventually(lambda: _gone(pid), 15, f"jobset manager {pid} to exit")
    assert not workdir.exists()


def test_failed_start_raises_with_the_log(tmp_path: Path) -> None:
    manager = JobSetManager(tmp_path / "no-such-kubeconfig")
    with pytest.raises(JobSetError, match="jobset exited with status 1 during start-up") as raised:
        manager.start()
    assert "no-such-kubeconfig" in str(raised.value)
    assert manager.pid is None
    assert not manager.workdir.exists()
