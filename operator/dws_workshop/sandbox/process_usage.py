"""What one process costs, read from Linux's /proc: CPU seconds and resident memory.

The operator runs as its own process in a load run so that these are its figures
alone, not the emulator's or the load generator's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024


def cpu_seconds(stat: str, ticks_per_second: int) -> float:
    """utime + stime of a `/proc/<pid>/stat` line (every thread of the process), seconds.

    The command name (field 2) is in parentheses and may hold spaces: fields are counted
    after its closing parenthesis, where utime and stime are the 12th and 13th.
    """
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def memory_bytes(status: str, key: str = "VmRSS") -> int:
    """A `kB` line of `/proc/<pid>/status` (VmRSS: resident now; VmHWM: the peak), bytes."""
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name == key:
            number, unit = value.split()
            if unit != "kB":
                raise ValueError(f"{key} in unexpected unit {unit!r}")
            return int(number) * 1024
    raise ValueError(f"{key} not in the process status")


@dataclass(frozen=True)
class Usage:
    """One reading: CPU seconds so far, resident and peak resident bytes."""

    cpu: float
    rss: int
    peak_rss: int


def read_usage(pid: int) -> Usage:
    proc = Path("/proc") / str(pid)
    ticks = os.sysconf("SC_CLK_TCK")
    status = (proc / "status").read_text()
    return Usage(
        cpu=cpu_seconds((proc / "stat").read_text(), ticks),
        rss=memory_bytes(status, "VmRSS"),
        peak_rss=memory_bytes(status, "VmHWM"),
    )
