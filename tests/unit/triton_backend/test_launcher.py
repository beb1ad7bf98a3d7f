"""The launcher refuses busy ports instead of reporting someone else's server READY."""

from __future__ import annotations

import socket
import subprocess
import sys

from triton_backend.launcher import REPO_ROOT, free_ports, port_in_use


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
        proc = subprocess.run([sys.executable, "-m", "triton_backend.launcher",
                               "--http-port", str(port)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"port {port} already in use" in proc.stderr
    assert "READY" not in proc.stdout
