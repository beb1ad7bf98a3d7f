"""The launcher refuses busy ports instead of reporting someone else's server READY, and
starts a server again on new ports when one it picked was taken meanwhile."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys

import pytest

from server_ops import launcher, ports as ports_module
from server_ops.launcher import (BACKEND_DIR_ENV, PORT_RETRIES, REPO_ROOT, TRITONSERVER_ENV,
                                 TritonServer, tritonserver_paths)
from server_ops.ports import LOWEST_PICKED_PORT, PortInUse, free_ports, port_in_use


def test_a_listening_port_is_busy_and_a_free_one_is_not():
    (port,) = free_ports(1)
    assert not port_in_use(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert port_in_use(port)


def test_make_serve_on_a_busy_port_fails_with_a_clear_message():
    (port,) = free_ports(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        proc = subprocess.run([sys.executable, "-m", "server_ops.launcher",
                               "--http-port", str(port)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"port {port} already in use" in proc.stderr
    assert "READY" not in proc.stdout


# -- which tritonserver: the pytriton wheel's, or a named one (the NGC container's) ------


def _server(root):
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tritonserver").write_text("")
    (root / "backends" / "python").mkdir(parents=True)
    (root / "backends" / "python" / "triton_python_backend_stub").write_text("")
    return root


def test_a_named_server_runs_with_the_backends_beside_its_bin(tmp_path, monkeypatch):
    root = _server(tmp_path / "opt" / "tritonserver")
    monkeypatch.setenv(TRITONSERVER_ENV, str(root / "bin" / "tritonserver"))
    monkeypatch.delenv(BACKEND_DIR_ENV, raising=False)
    assert tritonserver_paths() == (str(root / "bin" / "tritonserver"), str(root / "backends"))


def test_a_named_backend_folder_wins(tmp_path, monkeypatch):
    root = _server(tmp_path / "a")
    other = _server(tmp_path / "b")
    monkeypatch.setenv(TRITONSERVER_ENV, str(root / "bin" / "tritonserver"))
    monkeypatch.setenv(BACKEND_DIR_ENV, str(other / "backends"))
    assert tritonserver_paths()[1] == str(other / "backends")


def test_a_server_without_the_python_backend_stub_is_refused_naming_the_setting(
        tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv(TRITONSERVER_ENV, str(tmp_path / "bin" / "tritonserver"))
    monkeypatch.delenv(BACKEND_DIR_ENV, raising=False)
    with pytest.raises(RuntimeError, match=f"stub is missing.*{BACKEND_DIR_ENV}"):
        tritonserver_paths()


# -- ports the launcher picked are started again on new ones when taken meanwhile ----------
# No tritonserver: a fake one (FAKE_SERVER, run by a TritonServer whose command() is its)
# prints what tritonserver prints when a port is taken and exits 1, its first FAIL_TIMES
# starts; after that it answers /v2/health/ready and listens on its metrics port.

FAKE_SERVER = r'''
import http.server, json, os, socket, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
http_port, metrics_port = int(args["http-port"]), int(args["metrics-port"])
ports = [http_port, int(args["grpc-port"]), metrics_port]
state = os.environ["FAKE_SERVER_STATE"]
with open(state, "a") as fh:
    fh.write(json.dumps(ports) + "\n")
with open(state) as fh:
    attempt = len(fh.read().splitlines())
if attempt <= int(os.environ["FAKE_SERVER_FAIL_TIMES"]):
    print(os.environ["FAKE_SERVER_SAYS"].format(port=http_port), flush=True)
    sys.exit(1)
metrics = socket.socket()
metrics.bind(("0.0.0.0", metrics_port))
metrics.listen()
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/v2/health/ready" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
try:
    http.server.HTTPServer(("0.0.0.0", http_port), Ready).serve_forever()
except KeyboardInterrupt:
    pass
'''
IN_USE = "E1202 main.cc:257] \"failed to start HTTP service: Unavailable - Socket '0.0.0.0:{port}' already in use \""


class FakeTriton(TritonServer):
    script = ""

    def command(self):
        return [sys.executable, self.script, f"--http-port={self.http_port}",
                f"--grpc-port={self.grpc_port}", f"--metrics-port={self.metrics_port}"]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """fake(fail_times, says=IN_USE, **server_kwargs) -> (server, attempts): ``attempts()``
    lists the ports each start of the fake server got."""
    script = tmp_path / "fake_tritonserver.py"
    script.write_text(FAKE_SERVER)
    state = tmp_path / "starts.jsonl"
    monkeypatch.setenv("FAKE_SERVER_STATE", str(state))
    servers = []

    def make(fail_times, says=IN_USE, **kwargs):
        monkeypatch.setenv("FAKE_SERVER_FAIL_TIMES", str(fail_times))
        monkeypatch.setenv("FAKE_SERVER_SAYS", says)
        kwargs.setdefault("log_path", str(tmp_path / "tritonserver.log"))
        srv = FakeTriton(str(tmp_path), **kwargs)
        srv.script = str(script)
        servers.append(srv)

        def attempts():
            if not state.exists():
                return []
            return [tuple(json.loads(line)) for line in state.read_text().splitlines()]
        return srv, attempts

    yield make
    for srv in servers:
        srv.stop(timeout_s=30)


def _retry_lines(text):
    return [line for line in text.splitlines() if line.startswith("launcher: ")]


def test_a_server_that_lost_a_picked_port_starts_again_on_new_ones(fake, capfd):
    srv, attempts = fake(fail_times=2)
    with srv:
        assert srv.is_ready()
        tried = attempts()
        assert len(tried) == 3 and srv.port_retries == 2
        assert tried[-1] == srv.ports  # the URLs name the ports the server runs on
    # new ports each time: none of a start's ports was tried before
    for k in range(1, len(tried)):
        assert not set(tried[k]) & set().union(*tried[:k]), tried
    lines = _retry_lines(capfd.readouterr().err)
    assert len(lines) == 2, lines
    for k, line in enumerate(lines):
        (old_http, old_grpc, old_metrics), (http, grpc, metrics) = tried[k], tried[k + 1]
        assert "address already in use" in line
        assert f"retry {k + 1} of {PORT_RETRIES}" in line
        assert (f"on ports HTTP {old_http}, gRPC {old_grpc}, metrics {old_metrics};" in line)
        assert f"on new ports HTTP {http}, gRPC {grpc}, metrics {metrics}" in line
    # ... and the server log says it too
    with open(srv.log_path) as fh:
        assert _retry_lines(fh.read()) == lines


def test_the_start_is_retried_at_most_three_times(fake, capfd):
    srv, attempts = fake(fail_times=99)
    srv.start()
    with pytest.raises(RuntimeError, match="tritonserver exited with code 1"):
        srv.wait_ready()
    assert PORT_RETRIES == 3
    assert len(attempts()) == 1 + PORT_RETRIES and srv.port_retries == PORT_RETRIES
    assert len(set().union(*attempts())) == 3 * (1 + PORT_RETRIES)  # all new
    lines = _retry_lines(capfd.readouterr().err)
    assert [f"retry {k} of 3" in line for k, line in enumerate(lines, 1)] == [True] * 3


def test_ports_a_caller_fixed_are_never_swapped(fake, capfd):
    ports = free_ports(3)
    srv, attempts = fake(fail_times=1, http_port=ports[0], grpc_port=ports[1],
                         metrics_port=ports[2])
    srv.start()
    with pytest.raises(RuntimeError, match="tritonserver exited with code 1"):
        srv.wait_ready()
    assert attempts() == [tuple(ports)] and srv.ports == tuple(ports)
    assert _retry_lines(capfd.readouterr().err) == []


def _taken():
    """A listening socket on a port of the kernel's choosing (taken for certain)."""
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen()
    return s


def test_a_caller_fixed_port_already_taken_is_refused(fake):
    with _taken() as s:
        taken = s.getsockname()[1]
        http, metrics = free_ports(2, exclude={taken})
        srv, attempts = fake(fail_times=0, http_port=http, grpc_port=taken, metrics_port=metrics)
        with pytest.raises(PortInUse, match=f"port {taken} already in use"):
            srv.start()
    assert attempts() == []


def test_a_server_that_exits_for_another_reason_is_not_started_again(fake, capfd):
    srv, attempts = fake(fail_times=1, says="error: failed to load model 'x'")
    srv.start()
    with pytest.raises(RuntimeError, match="exited with code 1"):
        srv.wait_ready()
    assert len(attempts()) == 1
    assert _retry_lines(capfd.readouterr().err) == []


def test_a_picked_port_taken_before_the_start_is_swapped_at_once(fake, capfd, monkeypatch):
    with _taken() as s:
        taken = s.getsockname()[1]
        real = launcher.free_ports
        picks = iter([[taken, *real(2, exclude={taken})]])  # the first pick: a taken port
        monkeypatch.setattr(launcher, "free_ports",
                            lambda *a, **k: next(picks, None) or real(*a, **k))
        srv, attempts = fake(fail_times=0)
        assert srv.http_port == taken
        srv.start()
    srv.wait_ready()
    assert len(attempts()) == 1 and taken not in attempts()[0]
    (line,) = _retry_lines(capfd.readouterr().err)
    assert f"port {taken} taken before the start" in line and "retry 1 of 3" in line


def test_picked_ports_are_distinct_free_and_below_the_ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
        low = int(fh.read().split()[0])
    ports = free_ports(3)
    assert len(set(ports)) == 3
    if low - LOWEST_PICKED_PORT >= 300:
        assert all(LOWEST_PICKED_PORT <= p < low for p in ports), (ports, low)
    for p in ports:
        assert not port_in_use(p)


def test_picked_ports_skip_the_excluded_ones(monkeypatch):
    class Fixed(random.Random):  # proposes 20000, 20001, ... in turn
        n = -1

        def randrange(self, a, b):
            self.n += 1
            return a + self.n % 3

    monkeypatch.setattr(ports_module, "_ephemeral_low", lambda: 40000)
    ports = free_ports(2, exclude={LOWEST_PICKED_PORT}, rng=Fixed())
    assert LOWEST_PICKED_PORT not in ports and len(set(ports)) == 2


def test_a_server_binds_the_loopback_interface_unless_told_otherwise():
    local = TritonServer(http_port=18000, grpc_port=18001, metrics_port=18002).command()
    for api in ("http", "grpc", "metrics"):
        assert f"--{api}-address=127.0.0.1" in local
    every = TritonServer(http_port=18000, grpc_port=18001, metrics_port=18002,
                         address="0.0.0.0")
    assert "--http-address=0.0.0.0" in every.command() and every.host == "127.0.0.1"
    own = TritonServer(http_port=18000, grpc_port=18001, metrics_port=18002,
                       extra_args=("--grpc-address=10.0.0.5",)).command()
    assert [a for a in own if a.startswith("--grpc-address")] == ["--grpc-address=10.0.0.5"]


def test_a_key_restricts_the_model_repository_api_over_http_and_grpc():
    keyed = TritonServer(http_port=18000, grpc_port=18001, metrics_port=18002,
                         admin_key="k").command()
    assert "--http-restricted-api=model-repository:admin-key=k" in keyed
    assert "--grpc-restricted-protocol=model-repository:admin-key=k" in keyed
    plain = TritonServer(http_port=18000, grpc_port=18001, metrics_port=18002).command()
    assert not any("restricted" in a for a in plain)
