"""Triton's restricted-API key for the model-repository API (load, unload, index).

A launched server restricts that API (``--http-restricted-api`` and
``--grpc-restricted-protocol``): a model load runs code, so it needs the key. A client sends
it as the header ``ADMIN_KEY_HEADER``. ``make serve`` takes it from ``ADMIN_KEY_ENV``, or
makes one and prints it; the supervisor and the operator tools send it from there.
"""

from __future__ import annotations

import json
import os
import urllib.request

ADMIN_KEY_ENV = "EXPLICIT_BATCHING_ADMIN_KEY"
ADMIN_KEY_HEADER = "admin-key"
# Triton 2.51's gRPC front end reads a restricted protocol's key from this metadata key.
GRPC_ADMIN_KEY_HEADER = f"triton-grpc-protocol-{ADMIN_KEY_HEADER}"


def admin_headers(admin_key: str | None) -> dict[str, str]:
    """The header a model-repository call carries: ``admin_key``; none without one (an
    unrestricted server)."""
    return {ADMIN_KEY_HEADER: admin_key} if admin_key else {}


def env_admin_key() -> str | None:
    """The key in ``ADMIN_KEY_ENV`` (the operator tools' reloads send it), or None."""
    return os.environ.get(ADMIN_KEY_ENV) or None


def loaded_models(http_url: str, admin_key: str | None = None) -> list[str]:
    """Names of the models the server reports READY (its repository index, a
    model-repository call: it carries the key where the server has one)."""
    req = urllib.request.Request(f"http://{http_url}/v2/repository/index", data=b"{}",
                                 method="POST", headers={"Content-Type": "application/json",
                                                         **admin_headers(admin_key)})
    with urllib.request.urlopen(req, timeout=10) as resp:
        index = json.loads(resp.read())
    return sorted(m["name"] for m in index if m.get("state") == "READY")
