"""The stop flag's raiser names the tasks a slow stop still waits for, and only those the
operator started."""

from __future__ import annotations

import asyncio

from dws_operator.controller.stopping import Stopping, still_running


async def _stuck_forever() -> None:
    await asyncio.Event().wait()


async def _after_the_report_timer() -> None:
    """Returns once every timer due now (the report's) has run: a callback scheduled
    after them runs after them."""
    ran = asyncio.Event()
    asyncio.get_running_loop().call_later(0.0, ran.set)
    await ran.wait()


def test_a_slow_stop_names_the_task_it_waits_for_and_where() -> None:
    async def scenario() -> tuple[list[str], bool]:
        there_before = asyncio.all_tasks()
        stuck = asyncio.create_task(_stuck_forever(), name="left-running")
        flag = asyncio.Event()
        reports: list[str] = []
        ending = Stopping(flag, there_before, after=0.0, report=reports.append)
        ending()
        ending()  # kopf may end twice (a refusal, then its cleanup): one report
        await _after_the_report_timer()
        stuck.cancel()
        await asyncio.gather(stuck, return_exceptions=True)
        return reports, flag.is_set()

    reports, raised = asyncio.run(scenario())
    assert raised
    assert len(reports) == 1
    [report] = reports
    assert report.startswith("still stopping after 0s: 1 tasks running (left-running at ")
    assert "_stuck_forever" in report
    assert "test_stopping.py" in report
    assert "Task-1" not in report  # the task running the operator was there before


def test_a_stop_that_leaves_nothing_running_says_nothing() -> None:
    async def scenario() -> list[str]:
        reports: list[str] = []
        flag = asyncio.Event()
        ending = Stopping(flag, asyncio.all_tasks(), after=0.0, report=reports.append)
        ending()
        await _after_the_report_timer()
        return reports

    assert asyncio.run(scenario()) == []


def test_the_report_lists_threads_left_too() -> None:
    assert still_running([], ["asyncio_0"], 2.0) == (
        "still stopping after 2s: 0 tasks running, threads asyncio_0"
    )
