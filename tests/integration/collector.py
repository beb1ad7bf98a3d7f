"""Callbacks of asynchronous gRPC requests, kept per request: exactly one each is the
contract the integration tests check."""

import threading


class Collector:
    """Every callback per request: exactly one each is the contract."""

    def __init__(self):
        self.calls: dict[int, list] = {}
        self.lock = threading.Lock()
        self.done = threading.Semaphore(0)

    def callback(self, i):
        def cb(result, error):
            with self.lock:
                self.calls.setdefault(i, []).append((result, error))
            self.done.release()
        return cb

    def wait(self, n, timeout=60):
        for _ in range(n):
            assert self.done.acquire(timeout=timeout), "a request got no response"
        assert not self.done.acquire(timeout=0.5), "a request was answered twice"
        assert sorted(self.calls) == list(range(n))
        assert all(len(v) == 1 for v in self.calls.values())
