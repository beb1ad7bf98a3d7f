"""Process facts from /proc (Linux): RSS, threads, CPU seconds, and the Python-backend
stub that serves a model. Used by the reliability suite and ``make bench``."""

from __future__ import annotations

import os
import resource

from server_ops.supervisor import STUB_BINARY, stub_pids


def _proc_status(pid: int) -> dict[str, str]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    value = _proc_status(pid).get("VmRSS")
    return int(value.split()[0]) / 1024.0 if value else None


def threads(pid: int | None) -> int | None:
    if pid is None:
        return None
    value = _proc_status(pid).get("Threads")
    return int(value) if value else None


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of a process, by thread id: its scheduler run time
    (``/proc/<pid>/task/<tid>/schedstat``, nanoseconds); {} when the process is gone or
    schedstat is missing."""
    out = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                out[task] = int(fh.read().split()[0]) / 1e9
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return out


def cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a process: the sum of its threads' scheduler run time
    (``thread_cpu_s``), or ``/proc/<pid>/stat``'s clock ticks (10 ms steps) where
    schedstat is missing."""
    if pid is None:
        return None
    total_s = sum(thread_cpu_s(pid).values())
    if total_s:
        return total_s
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's children that ended and were waited
    for (perf_analyzer's runs, say)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _start_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def find_stub(server_pid: int, model: str) -> int | None:
    """The Python-backend stub of ``model`` under our server (``supervisor.stub_pids``:
    other servers may run on this machine). Right after a reload the old stub may still be
    exiting: the newest one wins."""
    pids = stub_pids(server_pid, model)
    return max(pids, key=_start_ticks) if pids else None


def is_stub(pid: int) -> bool:
    """Whether ``pid`` is (still) a Python-backend stub."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[0].endswith(STUB_BINARY)
    except OSError:
        return False
