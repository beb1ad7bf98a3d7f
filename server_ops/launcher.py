"""Start a real tritonserver (2.51, from the nvidia-pytriton wheel) on a model repository.

Used by ``make serve`` (``python -m server_ops.launcher``, the same command as
``explicit-batching serve``) and by the integration tests. No Triton Python API is
involved: this only runs the binary with the right environment (the venv's ``bin/`` first
on PATH, so the Python backend stub imports the venv's packages) and waits for readiness.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from server_ops.admin import ADMIN_KEY_ENV, ADMIN_KEY_HEADER, admin_headers, loaded_models
from server_ops.ports import PortInUse, free_ports, port_in_use
from server_ops.supervisor import StubSupervisor

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL_REPOSITORY = os.path.join(REPO_ROOT, "model_repository")


# A tritonserver other than the nvidia-pytriton wheel's (the NGC container's
# /opt/tritonserver/bin/tritonserver, say): its path, and its backends folder (default:
# ``backends`` beside its ``bin``).
TRITONSERVER_ENV = "EXPLICIT_BATCHING_TRITONSERVER"
BACKEND_DIR_ENV = "EXPLICIT_BATCHING_BACKEND_DIR"
# What a server the launcher starts binds by default: the loopback interface only. Triton's
# model-repository API can load a model, which runs code; nothing reachable from the
# network should offer it unless told to (--address 0.0.0.0 in a container, behind a
# front end; docs/deploy.md).
LOCAL_ADDRESS = "127.0.0.1"


def tritonserver_paths() -> tuple[str, str]:
    """(tritonserver binary, backend directory): EXPLICIT_BATCHING_TRITONSERVER when set,
    else the one inside the installed nvidia-pytriton wheel, else ``tritonserver`` on
    PATH (the NGC container)."""
    binary = os.environ.get(TRITONSERVER_ENV, "")
    if not binary:
        try:
            import pytriton
        except ImportError:
            binary = shutil.which("tritonserver") or ""
            if not binary:
                raise RuntimeError("no tritonserver: run 'make setup', or set "
                                   f"{TRITONSERVER_ENV} to the binary") from None
        else:
            root = os.path.join(os.path.dirname(pytriton.__file__), "tritonserver")
            binary = os.path.join(root, "bin", "tritonserver")
    backends = os.environ.get(BACKEND_DIR_ENV) or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(binary))), "backends")
    stub = os.path.join(backends, "python", "triton_python_backend_stub")
    if not os.path.exists(stub):
        raise RuntimeError(f"the Python backend stub is missing at {stub}: run 'make setup' "
                           f"(or set {BACKEND_DIR_ENV})")
    return binary, backends


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    # Bytecode caches in the model repository's top level break Triton's model polling.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


# What tritonserver 2.51 prints when a port it binds is taken, e.g. ``failed to start HTTP
# service: Unavailable - Socket '0.0.0.0:8000' already in use`` (gRPC also logs
# ``Address already in use ... syscall:"bind"``), before it exits.
ADDRESS_IN_USE = re.compile(r"already in use|address in use|error in bind", re.IGNORECASE)
# How many times a server on ports the launcher picked starts again on new ones.
PORT_RETRIES = 3


class TritonServer:
    """A tritonserver process; use as a context manager or call start()/stop()."""

    def __init__(self, model_repository: str = DEFAULT_MODEL_REPOSITORY,
                 http_port: int | None = None, grpc_port: int | None = None,
                 metrics_port: int | None = None, log_path: str | None = None,
                 exit_timeout_s: int = 30, extra_args: tuple[str, ...] = (),
                 address: str = LOCAL_ADDRESS, admin_key: str | None = None):
        # Ports the launcher picked (none given) may be taken before the server binds them:
        # then it starts again on new ones (PORT_RETRIES). Ports a caller fixed are refused
        # when taken (PortInUse), never swapped.
        self.ports_picked = None in (http_port, grpc_port, metrics_port)
        if self.ports_picked:
            http_port, grpc_port, metrics_port = free_ports(3)
        self.model_repository = os.path.abspath(model_repository)
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self.log_path = log_path
        self.exit_timeout_s = exit_timeout_s
        self.extra_args = tuple(extra_args)
        self.address = address  # what HTTP, gRPC and metrics bind (see LOCAL_ADDRESS)
        self.admin_key = admin_key  # None: the model-repository API is not restricted
        self.process: subprocess.Popen | None = None
        self._log_file = None
        self.port_retries = 0  # starts again on new ports so far
        self._tried_ports: set[int] = set()  # never tried twice
        self._log_offset = 0  # where start()'s output begins in log_path

    @property
    def host(self) -> str:
        """Where clients on this machine reach the server: its address, or the loopback
        interface where it binds them all."""
        return LOCAL_ADDRESS if self.address in ("0.0.0.0", "::", "") else self.address

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        binary, backends = tritonserver_paths()
        return [binary, f"--model-repository={self.model_repository}",
                f"--backend-directory={backends}",
                f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
                f"--metrics-port={self.metrics_port}",
                *(f"--{api}-address={self.address}" for api in ("http", "grpc", "metrics")
                  if not any(a.startswith(f"--{api}-address") for a in self.extra_args)),
                *((f"--http-restricted-api=model-repository:{ADMIN_KEY_HEADER}="
                   f"{self.admin_key}",
                   f"--grpc-restricted-protocol=model-repository:{ADMIN_KEY_HEADER}="
                   f"{self.admin_key}") if self.admin_key else ()),
                f"--exit-timeout-secs={self.exit_timeout_s}", *self.extra_args]

    @property
    def ports(self) -> tuple[int, int, int]:
        return self.http_port, self.grpc_port, self.metrics_port

    def _new_ports(self, why: str) -> None:
        """Move to new free ports (only ports the launcher picked), saying so."""
        old = self.ports
        self.port_retries += 1
        self._tried_ports.update(old)
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3, self._tried_ports)
        message = (f"launcher: {why} on ports {_ports_text(old)}; retry {self.port_retries} of "
                   f"{PORT_RETRIES} on new ports {_ports_text(self.ports)}")
        print(message, file=sys.stderr, flush=True)
        if self._log_readable():
            with open(self.log_path, "a") as fh:
                fh.write(message + "\n")

    def _log_readable(self) -> bool:
        return bool(self.log_path) and os.path.isfile(self.log_path)

    def start(self) -> "TritonServer":
        while True:
            busy = [p for p in self.ports if port_in_use(p)]
            if not (busy and self.ports_picked and self.port_retries < PORT_RETRIES):
                break
            self._new_ports(f"port {', '.join(map(str, busy))} taken before the start")
        if busy:
            # Else readiness would be read off whoever holds the port, while this server
            # dies with "Address already in use".
            raise PortInUse(f"port {', '.join(map(str, busy))} already in use: stop what "
                            "listens there or choose other ports (make serve HTTP_PORT=...; "
                            "gRPC and metrics use the next two)")
        out = None
        if self.log_path:
            self._log_offset = os.path.getsize(self.log_path) if self._log_readable() else 0
            self._log_file = open(self.log_path, "ab")
            out = self._log_file
        # Own session: a terminal's Ctrl-C reaches only the launcher, which then asks the
        # server once to stop gracefully (a second SIGINT would make it exit at once).
        env = server_env()
        # The explicit models' perception sidecar scrapes this server's own metrics port.
        env.setdefault("EXPLICIT_BATCHING_METRICS_URL", self.metrics_url)
        self.process = subprocess.Popen(self.command(), env=env, stdout=out,
                                        stderr=subprocess.STDOUT if out else None,
                                        start_new_session=True)
        return self

    def _lost_a_port(self) -> bool:
        """Whether the server start() ran exited because a port was taken: its output says
        so, or, when its output is not readable here (no log file, os.devnull), one of its
        ports is taken now."""
        if not self._log_readable():
            return any(port_in_use(p) for p in self.ports)
        with open(self.log_path, "rb") as fh:
            fh.seek(self._log_offset)
            output = fh.read().decode(errors="replace")
        return bool(ADDRESS_IN_USE.search(output))

    def _retry_on_new_ports(self) -> bool:
        """After the server exited before ready: start again on new ports when it lost one
        of the ports the launcher picked (at most PORT_RETRIES times); whether it did."""
        if not (self.ports_picked and self.process is not None
                and self.port_retries < PORT_RETRIES and self._lost_a_port()):
            return False
        code = self.process.returncode
        self.stop()  # its stubs, if it had loaded models, and the log file
        self._new_ports(f"tritonserver exited with code {code}: address already in use")
        self.start()
        return True

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                    f"http://{self.http_url}/v2/health/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        """Wait until this server is ready. A server on ports the launcher picked that exits
        because one was taken meanwhile starts again on new ones (http_url etc. change),
        within the same ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                if self._retry_on_new_ports():
                    continue
                raise RuntimeError(f"tritonserver exited with code {self.process.returncode}"
                                   + (f"; see {self.log_path}" if self.log_path else ""))
            # Ready, and from this process (it still runs): never someone else's server. The
            # metrics endpoint starts after HTTP's: callers read it at once (a ledger run met
            # "connection refused" there right after ready).
            if (self.is_ready() and self._metrics_up() and self.process is not None
                    and self.process.poll() is None):
                return
            time.sleep(0.5)
        raise TimeoutError(f"tritonserver not ready after {timeout_s:.0f} s"
                           + (f"; see {self.log_path}" if self.log_path else ""))

    def _metrics_up(self) -> bool:
        if "--allow-metrics=false" in self.extra_args:
            return True
        with socket.socket() as probe:
            probe.settimeout(0.5)
            return probe.connect_ex(("127.0.0.1", self.metrics_port)) == 0

    def load_model(self, model: str, timeout_s: float = 300.0) -> float:
        """Load ``model`` from the repository through Triton's repository API (the server
        must run with --model-control-mode=explicit); the seconds it took. Raises with
        Triton's refusal when it refuses. (A load with another config is
        ``operator_tools.live.ModelControl.load``.)"""
        started = time.monotonic()
        self._repository(f"models/{model}/load", {}, timeout_s)
        return time.monotonic() - started

    def unload_model(self, model: str, timeout_s: float = 60.0) -> None:
        """Unload ``model`` (Triton returns once the unload has begun)."""
        self._repository(f"models/{model}/unload", {}, timeout_s)

    def reload_model(self, model: str, timeout_s: float = 120.0) -> None:
        """Unload ``model`` and load it again: a fresh queue, controller and cost refit.
        The load is retried while Triton still refuses it because the unload has not
        finished; after ``timeout_s`` its last refusal is raised."""
        self.unload_model(model)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.load_model(model)
                return
            except RuntimeError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def _repository(self, path: str, body: dict, timeout_s: float) -> None:
        req = urllib.request.Request(
            f"http://{self.http_url}/v2/repository/{path}", data=json.dumps(body).encode(),
            method="POST", headers={"Content-Type": "application/json",
                                    **admin_headers(self.admin_key)})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{path}: {exc.read().decode(errors='replace')}") from None

    def stop(self, timeout_s: float | None = None) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=timeout_s or self.exit_timeout_s + 15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # A server that died hard (an abort, a kill) leaves its Python-backend stubs running
        # as orphans; they are still in its process group (its own session): end them.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # nothing left
        if self._log_file:
            self._log_file.close()
        return self.process.returncode

    def __enter__(self) -> "TritonServer":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _ports_text(ports: tuple[int, int, int]) -> str:
    http, grpc, metrics = ports
    return f"HTTP {http}, gRPC {grpc}, metrics {metrics}"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """``python -m server_ops.launcher``: ``explicit-batching serve`` (the click command
    parses; ``serve`` below runs)."""
    from operator_tools.server_cmds import run_as_module, serve_command  # noqa: PLC0415

    return run_as_module(serve_command, argv, "python -m server_ops.launcher")


def serve(model_repository: str, http_port: int, grpc_port: int | None,
          metrics_port: int | None, address: str, supervise: bool,
          tritonserver_args: list[str]) -> int:
    """Run tritonserver on ``model_repository`` until Ctrl-C or SIGTERM (the stub
    supervisor beside it unless ``supervise`` is false); ``tritonserver_args`` go to
    tritonserver as they are. Returns the exit status: 2 when a port is taken."""
    grpc = grpc_port or http_port + 1
    metrics = metrics_port or http_port + 2
    tritonserver_args = list(tritonserver_args)
    if supervise and not any(a.startswith("--model-control-mode") for a in tritonserver_args):
        # The supervisor reloads through the load API, which explicit mode opens.
        tritonserver_args = ["--model-control-mode=explicit", "--load-model=*",
                             *tritonserver_args]
    admin_key = os.environ.get(ADMIN_KEY_ENV) or secrets.token_urlsafe(16)
    server = TritonServer(model_repository, http_port, grpc, metrics,
                          extra_args=tuple(tritonserver_args), address=address,
                          admin_key=admin_key)
    # SIGTERM (a service manager, `kill`) stops the server as cleanly as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"starting tritonserver on {server.model_repository}", flush=True)
    try:
        server.start()
    except PortInUse as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        server.wait_ready()
        key_note = ("" if os.environ.get(ADMIN_KEY_ENV) else
                    f"; this run's key: export {ADMIN_KEY_ENV}={admin_key}")
        print(f"\nREADY  HTTP    http://{server.http_url}\n"
              f"       gRPC    {server.grpc_url}\n"
              f"       metrics {server.metrics_url}\n"
              f"The model-repository API (load, unload) needs the header "
              f"'{ADMIN_KEY_HEADER}: <key>'{key_note}\n"
              "Ctrl-C stops the server.", flush=True)
        if supervise:
            models = loaded_models(server.http_url, admin_key)
            StubSupervisor(server.process.pid, server.http_url, models,
                           log=lambda m: print(m, flush=True), admin_key=admin_key).start()
            print(f"supervisor: reloads any of {', '.join(models)} whose stub dies", flush=True)
        return server.process.wait()
    except KeyboardInterrupt:
        print("\nstopping tritonserver ...", flush=True)
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
