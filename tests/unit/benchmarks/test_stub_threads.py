"""``benchmarks/stub_threads.py``: the per-thread reading (``procinfo.thread_cpu_s``) and
its page (the server run is ``scripts/stub_threads.py`` itself)."""

from __future__ import annotations

import argparse
import os
import threading

from benchmarks.hold_speed import Row
from benchmarks.procinfo import thread_cpu_s
from benchmarks.stub_threads import page, thread_names


def test_thread_cpu_reads_every_thread_of_a_process_by_id():
    done = threading.Event()
    worker = threading.Thread(target=done.wait, daemon=True)
    worker.start()
    try:
        cpu = thread_cpu_s(os.getpid())
    finally:
        done.set()
        worker.join()
    assert str(threading.get_native_id()) in cpu
    assert str(worker.native_id) in cpu
    assert all(seconds >= 0.0 for seconds in cpu.values())
    assert cpu[str(threading.get_native_id())] > 0.0  # this thread has run


def test_without_py_spy_threads_have_no_names():
    assert thread_names(os.getpid(), None) == {}


def test_the_page_lists_each_row_with_its_threads_busiest_first():
    args = argparse.Namespace(rates=[400.0], rounds=1, profile="flat", time_scale=None,
                              idle_s=0.0)
    row = Row("emulated_explicit", None, 400.0, throughput=399.6, p50_ms=8.3)
    lines = page([(1, 400.0, "emulated_explicit", row,
                   {"explicit-metrics": 14.2, "MainThread": 431.0, "thread 7": 0.1})], args)
    assert "scripts/stub_threads.py --rates 400 --rounds 1" in lines[2]
    assert lines[-2] == ("| 1 | 400 | emulated_explicit | 400 | 8.3 | 445 | "
                         "MainThread 431, explicit-metrics 14 |  |")


def test_idle_rows_are_per_second_and_the_command_names_the_device():
    args = argparse.Namespace(rates=[43.0], rounds=2, profile="h200_minilm", time_scale=57.0,
                              idle_s=10.0)
    lines = page([(0, 0.0, "emulated_explicit", None,
                   {"perception-sidecar": 1.51, "explicit-metrics": 0.36, "thread 9": 0.001})],
                 args)
    assert lines[0].endswith("EMULATED h200_minilm at time scale 57)")
    assert ("scripts/stub_threads.py --rates 43 --rounds 2 --profile h200_minilm "
            "--time-scale 57 --idle-s 10`") in lines[2]
    assert lines[-2] == ("| 0 | idle | emulated_explicit | - | - | 1.87 | "
                         "perception-sidecar 1.51, explicit-metrics 0.36 |  |")
