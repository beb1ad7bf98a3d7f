"""``deferred.Deferred``: host work a finished batch leaves for later. Contracts: each item
runs once, in the order added, from whichever thread asks first; a failing item is
reported and dropped, and the rest still run; ``run_due`` runs them all once
``max_items`` wait or the oldest is ``max_age_s`` old, and nothing before."""

from __future__ import annotations

import threading

from triton_backend.deferred import Deferred


def test_each_item_runs_once_in_the_order_added():
    ran, errors = [], []
    work = Deferred(lambda: errors.append(1))
    for k in range(3):
        work.add(lambda k=k: ran.append(k))
    work.run_all()
    work.run_all()
    assert ran == [0, 1, 2] and not errors


def test_items_wait_until_enough_wait_or_the_oldest_is_old_enough():
    ran = []
    work = Deferred(lambda: None, max_items=3, max_age_s=0.05)
    work.run_due(0.0)  # nothing waits: nothing to run
    work.add(lambda: ran.append(0), 1.0)
    work.add(lambda: ran.append(1), 1.01)
    work.run_due(1.049)
    assert ran == []
    work.add(lambda: ran.append(2), 1.02)
    work.run_due(1.02)  # three wait
    assert ran == [0, 1, 2]
    work.add(lambda: ran.append(3), 2.0)  # the age counts from the oldest still waiting
    work.run_due(2.049)
    assert ran == [0, 1, 2]
    work.run_due(2.05)
    assert ran == [0, 1, 2, 3]


def test_a_failing_item_is_reported_and_the_rest_still_run():
    ran, errors = [], []
    work = Deferred(lambda: errors.append(1))
    work.add(lambda: 1 / 0)
    work.add(lambda: ran.append("after"))
    work.run_all()
    work.guarded(lambda x: 1 / x, 0)
    assert ran == ["after"] and len(errors) == 2


def test_two_threads_never_run_an_item_twice():
    """The batch thread and the metrics thread both run what is due: each item once."""
    ran = []
    work = Deferred(lambda: None)
    start = threading.Barrier(2)

    def drain():
        start.wait()
        for _ in range(200):
            work.run_all()

    threads = [threading.Thread(target=drain) for _ in range(2)]
    for t in threads:
        t.start()
    for k in range(2000):
        work.add(lambda k=k: ran.append(k))
    for t in threads:
        t.join()
    work.run_all()
    assert sorted(ran) == list(range(2000)) and ran == sorted(ran)
