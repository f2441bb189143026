"""The stop flag's raiser names the tasks a slow stop still waits for, and only those the
operator started."""

from __future__ import annotations

import asyncio

from dws_operator.controller.stopping import Stopping, still_running


async def _stuck_forever() -> None:
    await asyncio.Event().wait()


def test_a_slow_stop_names_the_task_it_waits_for_and_where() -> None:
    async def scenario() -> tuple[str, bool]:
        there_before = asyncio.all_tasks()
        stuck = asyncio.create_task(_stuck_forever(), name="left-running")
        flag = asyncio.Event()
        said: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        ending = Stopping(flag, there_before, after=0.0, report=said.set_result)
        ending()
        ending()  # kopf may end twice (a refusal, then its cleanup): one report
        report = await said
        stuck.cancel()
        await asyncio.gather(stuck, return_exceptions=True)
        return report, flag.is_set()

    report, raised = asyncio.run(scenario())
    assert raised
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
        # The report's timer has run once another callback scheduled after it has.
        ran = asyncio.Event()
        asyncio.get_running_loop().call_later(0.0, ran.set)
        await ran.wait()
        return reports

    assert asyncio.run(scenario()) == []


def test_the_report_lists_threads_left_too() -> None:
    assert still_running([], ["asyncio_0"], 2.0) == (
        "still stopping after 2s: 0 tasks running, threads asyncio_0"
    )
