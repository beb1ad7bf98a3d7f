"""Stub supervisor: reloads a model whose Python-backend stub died.

Triton 2.51's Python backend neither restarts a dead stub nor marks its model not ready:
``/v2/models/<m>/ready`` stays 200 while every request fails "Stub process ... is not
healthy", until the model is reloaded. The supervisor runs beside the server (the same
host: it reads ``/proc``), watches the stubs of the models it is given, and when a model
that Triton still reports READY has lost a stub with no replacement (a crash, not a
reload), it reloads that model through the load API - forced with the model's own config,
since a plain ``load`` of an unmodified model does nothing. That needs the server in
``--model-control-mode=explicit`` (``make serve`` starts it so).

    explicit-batching supervise --server-pid PID --url localhost:8000 MODEL [...]
    (or python -m server_ops.supervisor with the same arguments)

Requests are not the supervisor's business: with ``intake: hold`` every request is inside
a running ``execute()`` call or still in Triton's queue, and Triton fails them itself.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from typing import Callable, Iterable

from server_ops.admin import admin_headers

STUB_BINARY = b"triton_python_backend_stub"
# A failed reload is tried again after this long, doubling each time up to the cap: a
# server busy loading, or briefly unreachable, gets time; a model left failing does not.
RELOAD_BACKOFF_S = 1.0
RELOAD_BACKOFF_MAX_S = 60.0


def _server_stub_argvs(server_pid: int, proc: str) -> dict[int, list[bytes]]:
    """argv of every Python-backend stub whose parent is ``server_pid`` (one /proc scan)."""
    stubs = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            if ppid != server_pid:
                continue
            with open(f"{proc}/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if argv and argv[0].endswith(STUB_BINARY):
            stubs[int(entry)] = argv
    return stubs


def _of_model(argvs: dict[int, list[bytes]], model: str) -> set[int]:
    needle = f"/{model}/".encode()
    return {pid for pid, argv in argvs.items()
            if any(needle in a or a.endswith(needle[:-1]) for a in argv[1:])}


def stub_pids(server_pid: int, model: str, proc: str = "/proc") -> set[int]:
    """PIDs of the Python-backend stubs of ``model`` whose parent is ``server_pid``."""
    return _of_model(_server_stub_argvs(server_pid, proc), model)


def _http(url: str, body: dict | None = None, timeout_s: float = 5.0,
          headers: dict[str, str] | None = None) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return resp.read()


class StubSupervisor:
    """Watches the stubs of ``models`` under ``server_pid`` every ``period_s``."""

    def __init__(self, server_pid: int, http_url: str, models: Iterable[str],
                 period_s: float = 0.5, log: Callable[[str], None] = print,
                 proc: str = "/proc", clock: Callable[[], float] = time.monotonic,
                 admin_key: str | None = None):
        self.server_pid = server_pid
        self.base = f"http://{http_url}"
        self.models = tuple(models)
        self.period_s = period_s
        self.log = log
        self.proc = proc
        self.reloads: dict[str, int] = {m: 0 for m in self.models}
        self._seen: dict[str, set[int]] = {m: set() for m in self.models}
        # model -> (when to try the reload again, the backoff, its try, the stubs lost)
        self._retry: dict[str, tuple[float, float, int, set[int]]] = {}
        self._clock = clock
        # The restricted model-repository API's header (server_ops/admin.py).
        self._repository_headers = admin_headers(admin_key)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def seen(self, model: str) -> set[int]:
        """The stubs of ``model`` the last round found alive (a crash is one of them gone)."""
        return set(self._seen[model])

    def ready(self, model: str) -> bool:
        try:
            _http(f"{self.base}/v2/models/{model}/ready", timeout_s=2.0)
            return True
        except OSError:
            return False

    def check(self) -> list[str]:
        """One round: the models whose reload was tried this round (a crash found, or a
        failed reload's next try due)."""
        tried = []
        stubs = _server_stub_argvs(self.server_pid, self.proc)  # one scan for every model
        now = self._clock()
        for model in self.models:
            live = _of_model(stubs, model)
            if model in self._retry:  # a failed reload: the model is still broken
                at, backoff, attempt, dead = self._retry[model]
                if now >= at:
                    tried.append(model)
                    self._try_reload(model, dead, attempt + 1, backoff)
                continue
            seen = self._seen[model]
            # A reload starts new stubs before the old ones go; a crash only loses some.
            if seen and live < seen and self.ready(model):
                tried.append(model)
                self._try_reload(model, seen - live, 1, RELOAD_BACKOFF_S / 2)
                continue
            self._seen[model] = live
        return tried

    def _try_reload(self, model: str, dead: set[int], attempt: int, backoff_s: float) -> None:
        """Reload; on failure, try again after twice ``backoff_s`` (capped)."""
        if self.reload(model, dead, attempt):
            self._retry.pop(model, None)
            self._seen[model] = stub_pids(self.server_pid, model, self.proc)
            return
        backoff_s = min(2 * backoff_s, RELOAD_BACKOFF_MAX_S)
        self._retry[model] = (self._clock() + backoff_s, backoff_s, attempt, dead)
        self.log(f"supervisor: {model}: try {attempt + 1} in {backoff_s:g} s")

    def reload(self, model: str, dead: set[int], attempt: int = 1) -> bool:
        """Reload ``model`` through the load API; whether it worked (each try logged)."""
        self.log(f"supervisor: {model}: stub {sorted(dead)} died; reloading the model"
                 + (f" (try {attempt})" if attempt > 1 else ""))
        started = time.monotonic()
        try:
            self._load(model)
        except OSError as exc:
            self.log(f"supervisor: {model}: reload failed ({exc}); the model keeps failing "
                     "until it is reloaded (is the server in --model-control-mode=explicit?)")
            return False
        self.reloads[model] += 1
        self.log(f"supervisor: {model}: reloaded in {time.monotonic() - started:.1f} s")
        return True

    def _load(self, model: str) -> None:
        """The forced reload: the model's own config as the load's parameter (a plain load
        of an unmodified model does nothing)."""
        config = json.loads(_http(f"{self.base}/v2/models/{model}/config"))
        _http(f"{self.base}/v2/repository/models/{model}/load",
              {"parameters": {"config": json.dumps(config)}}, timeout_s=120.0,
              headers=self._repository_headers)

    def start(self) -> "StubSupervisor":
        self._thread = threading.Thread(target=self._run, name="stub-supervisor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.check()
            except Exception as exc:  # keep watching whatever one round hit
                self.log(f"supervisor: check failed: {type(exc).__name__}: {exc}")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop watching; a round under way (a reload included) may finish for
        ``timeout_s``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)


def main(argv: list[str] | None = None) -> int:
    """``python -m server_ops.supervisor``: ``explicit-batching supervise``."""
    from operator_tools.server_cmds import run_as_module, supervise_command  # noqa: PLC0415

    return run_as_module(supervise_command, argv, "python -m server_ops.supervisor")


def supervise(server_pid: int, url: str, models: Iterable[str], period_s: float) -> int:
    """Watch the stubs of ``models`` until the server process is gone (or Ctrl-C)."""
    sup = StubSupervisor(server_pid, url, list(models), period_s,
                         log=lambda m: print(m, flush=True)).start()
    try:
        while os.path.exists(f"/proc/{server_pid}"):
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        sup.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
