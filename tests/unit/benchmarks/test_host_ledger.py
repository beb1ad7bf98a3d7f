"""benchmarks/host_ledger.py without a server: the stage split of a profile, the thread
account read from an unload log line, and the repository it builds."""

from __future__ import annotations

import cProfile
import os
import time

import pytest

from server_ops.intake_config import parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def hl():
    from benchmarks import host_ledger

    return host_ledger


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def decode_call():  # named as the adapter's stage entries are
    _spin(0.02)


def submit():
    _spin(0.01)


def _send():
    submit()  # a stage entered from inside another counts for the outer one only
    _spin(0.01)


def test_stage_split_counts_each_stage_once_on_the_thread_clock(hl, tmp_path):
    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    for _ in range(3):
        decode_call()
        submit()
        _send()
        _spin(0.005)  # other
    prof.disable()
    path = str(tmp_path / "m.execute.pstats")
    prof.dump_stats(path)
    split = hl.stage_split(path)
    assert split["execute() and decode"] == pytest.approx(0.06, rel=0.3)
    assert split["enqueue"] == pytest.approx(0.03, rel=0.3)  # not the one inside _send
    assert split["send"] == pytest.approx(0.06, rel=0.3)
    assert split["decide"] == 0.0
    assert split["total"] == pytest.approx(sum(v for k, v in split.items() if k != "total"))


def test_thread_account_reads_the_unload_line(hl, tmp_path):
    log = tmp_path / "server.log"
    log.write_text('I1201 10:00:00.000 1 triton_models.py:1] "explicit_hold: unloading; '
                   'thread CPU s: execute=1.50 loop=0.00 respond=0.00; requests=3000;"\n')
    threads, requests = hl._thread_account(str(log), "explicit_hold")
    assert threads == {"execute": 1.5, "loop": 0.0, "respond": 0.0} and requests == 3000


def test_repository_holds_native_and_every_intake_on_the_profile(hl, tmp_path):
    names = hl.build_repository(str(tmp_path), 1.0, False, "h200_minilm")
    assert names == ["explicit_gather", "explicit_release", "explicit_hold", "emulated_native"]
    native = parse((tmp_path / "emulated_native" / "config.pbtxt").read_text())
    assert native.max_batch_size == 64
    assert native.parameters["hardware_profile"].string_value == "h200_minilm"
    hold = parse((tmp_path / "explicit_hold" / "config.pbtxt").read_text())
    assert hold.parameters["hardware_profile"].string_value == "h200_minilm"
    assert hold.parameters["intake"].string_value == "hold" and hold.name == "explicit_hold"

