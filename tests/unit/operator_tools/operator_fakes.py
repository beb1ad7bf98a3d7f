"""Test doubles shared by the live operator-command tests (monitor, analyze)."""

from __future__ import annotations

from operator_tools import live


class FakeClock:
    """A monotonic clock the code under test advances by "sleeping"."""

    def __init__(self, start: float = 100.0):
        self.now = start

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def scripted_sampling(pages, start: float = 100.0) -> live.SamplingDeps:
    """SamplingDeps whose sampling runs the real ``sample_series`` over ``pages`` (the last
    page repeats) on a fake clock."""
    queue = list(pages)
    clock = FakeClock(start)

    def fetch(url):
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def sample(url, model, duration_s, interval_s):
        return live.sample_series(url, model, duration_s, interval_s, fetch=fetch, clock=clock,
                                  sleep=clock.sleep)
    return live.SamplingDeps(sample=sample)
