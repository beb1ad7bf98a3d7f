"""The launcher refuses busy ports instead of reporting someone else's server READY."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from triton_backend.launcher import (BACKEND_DIR_ENV, REPO_ROOT, TRITONSERVER_ENV, free_ports,
                                    port_in_use, tritonserver_paths)


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
