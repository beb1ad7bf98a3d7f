"""``benchmarks/stub_profile.py``: reading py-spy's raw stacks and the page (the server run
is ``scripts/stub_profile.py`` itself)."""

from __future__ import annotations

import argparse

from benchmarks.hold_speed import Row
from benchmarks.stub_profile import NO_PYTHON, frame_name, main_thread, page, parse_raw

RAW = [
    "thread (11): MainThread;execute (/srv/m/explicit_model.py:198);"
    "decode_call (/srv/m/decode.py:51) 30",
    "thread (11): MainThread;execute (/srv/m/explicit_model.py:198) 10",
    "thread (11): MainThread 60",
    "thread (12): explicit-metrics;_metrics_loop (/srv/m/explicit_model.py:224) 5",
    "",
    "not a sample line",
]


def test_frames_keep_the_file_name_only():
    assert frame_name("decode_call (/srv/m/decode.py:51)") == "decode_call (decode.py:51)"
    assert frame_name("<listcomp> (/a/b/runner.py:340)") == "<listcomp> (runner.py:340)"


def test_raw_stacks_count_per_thread_self_and_inclusive():
    threads = parse_raw(RAW)
    main = threads["thread (11): MainThread"]
    assert main["samples"] == 100
    assert main["inclusive"]["execute (explicit_model.py:198)"] == 40
    assert main["self"]["decode_call (decode.py:51)"] == 30
    assert main["self"][NO_PYTHON] == 60  # no Python frame: the C++ loop
    assert threads["thread (12): explicit-metrics"]["samples"] == 5
    assert main_thread(threads) == "thread (11): MainThread"
    assert main_thread({}) is None


def test_the_page_compares_the_models_per_thousand_requests():
    runs = [{"model": m, "row": Row(m, None, 1200.0, 1200.0, 10.0, stub_us=250.0,
                                    answered=answered), "threads": parse_raw(RAW)}
            for m, answered in (("explicit", 2000), ("native", 1000))]
    args = argparse.Namespace(profile="flat", rate=1200.0, concurrency=0, seconds=12)
    text = "\n".join(page(runs, args))
    assert "--profile flat --rate 1200 --seconds 12" in text
    # 40 samples of 2.5 ms over 2,000 and over 1,000 answered requests
    assert "| execute (explicit_model.py:198) | 50.0 | 100.0 |" in text
    assert "| explicit | thread (11): MainThread | 125.0 | 250 (all threads) |" in text
