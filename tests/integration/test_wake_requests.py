"""intake hold's wake requests (``waker.Waker``, opt-in: parameter ``wake_after_ms``) in a
real server.

With the shipped queue bound Triton 2.51's batcher cannot prefetch and loses a wake-up
now and then, so the plugin can send itself wake requests after a call when no call
follows.
Checked here as behaviour: a client's request gets its one answer; the wake requests that
follow are answered (Triton counts them) and counted by the plugin's
``wake_requests_total``; an idle model sends a few and then none, until the next request;
a model whose queue prefetches (no queue policy) ignores the parameter and sends none.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sidecar.triton_metrics import fetch_url, model_sample_sum
from tests.eventually import eventually, stays
from tests.integration.gates import triton_counts
from tests.integration.models import emulated_copy
from triton_backend.waker import WAKE_AFTER_MS_MEASURED, WAKE_IDLE_CALLS, WAKE_MAX_IN_FLIGHT
from server_ops.intake_config import hold_config
from triton_backend.metric_catalog import WAKE_REQUESTS_METRIC

pytestmark = pytest.mark.integration
BOUNDED, UNBOUNDED, SHIPPED = "wake_bounded", "wake_unbounded", "wake_shipped"
WAKE_MS = WAKE_AFTER_MS_MEASURED  # the opt-in, as measured (off by default)
HANG_GUARD_S = 60.0
STEADY_S = 3.0  # the counts must stay the same this long to count as stopped


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("wake") / "repo")
    extra = ('parameters { key: "sidecar" value: { string_value: "off" } }\n'
             f'parameters {{ key: "wake_after_ms" value: {{ string_value: "{WAKE_MS}" }} }}\n')
    # bounded as the shipped config was before it dropped the queue policy
    emulated_copy(repo, BOUNDED, lambda c: hold_config(c, max_queue_size=128), extra=extra)
    emulated_copy(repo, UNBOUNDED, lambda c: hold_config(c, max_queue_size=0), extra=extra)
    emulated_copy(repo, SHIPPED, extra=extra.splitlines(keepends=True)[0])  # no parameter
    log = str(tmp_path_factory.mktemp("wakelogs") / "tritonserver.log")
    srv = TritonServer(repo, log_path=log, exit_timeout_s=15, extra_args=(
        "--model-control-mode=explicit", f"--load-model={BOUNDED}",
        f"--load-model={UNBOUNDED}", f"--load-model={SHIPPED}"))
    with srv:
        yield srv


def _infer(url: str, model: str, n: int) -> None:
    with grpcclient.InferenceServerClient(url) as client:
        for _ in range(n):
            ids = grpcclient.InferInput("INPUT_IDS", [1, 4], "INT64")
            ids.set_data_from_numpy(np.array([[101, 2000, 3000, 102]], dtype=np.int64))
            result = client.infer(model, [ids], client_timeout=30)
            assert result.as_numpy("EMBEDDING").shape == (1, 384)


def _counts(server, model: str) -> tuple[float, float]:
    """(requests Triton answered - served or failed -, the plugin's wake_requests_total)
    for ``model``. A wake request Triton refused (a full queue) is answered too: as a
    failure, so every wake request sent is in the first figure."""
    counts = triton_counts(server.metrics_url, model)
    wakes = model_sample_sum(fetch_url(server.metrics_url, 10.0),
                             WAKE_REQUESTS_METRIC, model)
    return counts.success + counts.failure, wakes


def _steady_counts(server, model: str) -> tuple[float, float]:
    """The counts once they have stopped moving: the same for STEADY_S (hang guard:
    HANG_GUARD_S; wake requests that never stop fail it)."""
    def steady():
        first = _counts(server, model)
        stays(lambda: _counts(server, model) == first, STEADY_S,
              what=f"{model}: the request counts unchanged", poll_s=0.5)
        return first
    return eventually(steady, HANG_GUARD_S, what=f"{model}: the request counts stop moving")


def test_an_idle_bounded_model_sends_a_few_wake_requests_then_none(server):
    real = 5
    _infer(server.grpc_url, BOUNDED, real)
    success, wakes = _steady_counts(server, BOUNDED)  # steady: it stopped sending
    print(f"\n{real} requests: {wakes:.0f} wake requests, Triton counted {success}")
    assert success - real == wakes, "every wake request sent is answered, and only those"
    # At least one follows the last call; at most WAKE_MAX_IN_FLIGHT a round, and a round
    # per call that held wake requests only (WAKE_IDLE_CALLS), after each real request.
    assert 1 <= wakes <= real * (WAKE_IDLE_CALLS + 1) * WAKE_MAX_IN_FLIGHT
    # A later request starts sending again, and it stops again.
    _infer(server.grpc_url, BOUNDED, 1)
    success2, wakes2 = _steady_counts(server, BOUNDED)
    assert success2 - (real + 1) == wakes2 and wakes2 > wakes


def test_a_model_whose_queue_prefetches_sends_none(server):
    real = 5
    _infer(server.grpc_url, UNBOUNDED, real)
    success, wakes = _steady_counts(server, UNBOUNDED)
    assert (success, wakes) == (real, 0)


def test_the_shipped_default_sends_none(server):
    real = 5
    _infer(server.grpc_url, SHIPPED, real)
    assert _steady_counts(server, SHIPPED) == (real, 0)
