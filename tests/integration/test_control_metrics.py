"""Triton's own metrics port carries every control-state metric, with plausible values,
while the explicit model is under load."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sidecar.triton_metrics import fetch_url, read_samples
from tests.eventually import eventually, stays
from triton_backend.metric_catalog import (COUNTERS, GAUGES, HISTOGRAM_PUBLISH_PERIOD_S, PREFIX,
                                          all_metric_names)

pytestmark = pytest.mark.integration
MODEL = "emulated_explicit"


def scrape(server) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} for this plugin's samples."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for s in read_samples(fetch_url(server.metrics_url, 5)) if s.name.startswith(PREFIX)}


def value(samples, name, **labels) -> float:
    """The model's one series of ``name`` with ``labels`` (one instance: one series)."""
    return total(samples, name, **labels)


def total(samples, name, model=MODEL, **labels) -> float:
    return sum(v for (n, lab), v in samples.items() if n == name and dict(lab).get("model") == model
               and all(dict(lab).get(k) == w for k, w in labels.items()))


def _infer(server, ids, sla_ms):
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        ids_in = httpclient.InferInput("INPUT_IDS", [1, len(ids)], "INT64")
        ids_in.set_data_from_numpy(np.asarray(ids, dtype=np.int64).reshape(1, -1))
        sla = httpclient.InferInput("SLA_MS", [1, 1], "FP32")
        sla.set_data_from_numpy(np.array([[sla_ms]], dtype=np.float32))
        client.infer(MODEL, [ids_in, sla])
        return "ok"
    except InferenceServerException as exc:
        return "infeasible" if "deadline infeasible" in str(exc) else "invalid"
    finally:
        client.close()


def wait_for_healthy_sidecar(server) -> None:
    """The sidecar starts while the server is still loading (its metrics port not up yet)
    and backs off; it reports healthy within one backoff period once the port answers."""
    eventually(lambda: value(scrape(server), PREFIX + "sidecar_health") == 1.0, 60,
               what="the sidecar healthy")


def _counts(samples) -> dict:
    """The counters and histograms among ``samples`` (gauges move on their own)."""
    return {k: v for k, v in samples.items()
            if k[0].endswith(("_total", "_count", "_sum", "_bucket"))}


def quiet_scrape(server) -> dict:
    """A scrape once the model has nothing unpublished: its counters stay the same over a
    histogram publish period and a control period more (whatever ran before this test, or
    in another order, is then all in ``before``)."""
    def steady():
        first = scrape(server)
        stays(lambda: _counts(scrape(server)) == _counts(first),
              HISTOGRAM_PUBLISH_PERIOD_S + 0.2, what="the plugin's counters unchanged")
        return first
    return eventually(steady, what="the plugin's counters settled")


WAIT_FOR = ((PREFIX + "batch_size_sum", {}, 120), (PREFIX + "sla_requests_total", {}, 120),
            (PREFIX + "request_duration_seconds_count", {}, 120),
            (PREFIX + "rejected_requests_total", {"reason": "invalid_input"}, 5),
            (PREFIX + "rejected_requests_total", {"reason": "deadline_infeasible"}, 5))


def test_every_control_metric_is_exported_with_plausible_values(server):
    wait_for_healthy_sidecar(server)
    # A call is launched before its SLAs are read, each taken as the smallest SLA the model
    # has seen (docs/how-it-works.md, "A call launched first"): a request below every earlier
    # one runs in its launch and is served. One 0.5 ms request first, served or refused, makes
    # 0.5 ms that smallest SLA, so each of the five below is refused as infeasible.
    assert _infer(server, [101, 2000, 102], 0.5) in ("ok", "infeasible")
    before = quiet_scrape(server)
    rng = np.random.default_rng(5)
    # SLAs of a minute: no loaded machine makes them infeasible.
    work = [([101, *rng.integers(1000, 30000, size=int(n)), 102], 60000.0)
            for n in rng.integers(8, 120, size=120)]
    work += [([101, 0, 102], 60000.0)] * 5       # invalid: padding id
    work += [([101, 2000, 102], 0.5)] * 5       # infeasible: 0.5 ms SLA
    with ThreadPoolExecutor(max_workers=32) as pool:
        outcomes = list(pool.map(lambda w: _infer(server, *w), work))
    assert outcomes.count("ok") == 120 and outcomes.count("invalid") == 5
    assert outcomes.count("infeasible") == 5
    # Metrics are flushed once per control period (100 ms), the latency histograms once a
    # second: wait until the 120 served requests and the 10 refusals are published (a
    # refusal made after the flush that carried the last served request comes one flush
    # later), then until nothing more comes (the exact deltas below).
    def published():
        now = scrape(server)
        return all(total(now, n, **labels) - total(before, n, **labels) >= want
                   for n, labels, want in WAIT_FOR)
    eventually(published, what=f"published: {[(n, want) for n, _, want in WAIT_FOR]}")
    after = quiet_scrape(server)

    names = {n for n, _ in after}
    for family in all_metric_names():
        assert any(n == family or n.startswith(family + "_") for n in names), family

    zone = value(after, PREFIX + "zone")
    assert zone in (0.0, 1.0, 2.0)
    assert 0.0005 <= value(after, PREFIX + "window_seconds") <= 0.020  # t4 profile bounds
    assert value(after, PREFIX + "queue_depth") >= 0
    assert 0.0 <= value(after, PREFIX + "utilization_ratio") <= 1.0
    assert value(after, PREFIX + "sidecar_health") == 1.0              # endpoint up, no NVML
    # Measured intervals: their sign and an age that is not stale (a loaded machine delays
    # decisions by seconds at worst; how prompt they are is make bench's to measure).
    assert 0.0 <= value(after, PREFIX + "observation_age_seconds") < 30.0
    assert 0.05 <= value(after, PREFIX + "control_period_seconds") < 30.0
    assert value(after, PREFIX + "control_lag_seconds") >= 0.0
    assert 0.05 <= value(after, PREFIX + "cost_correction_ratio") <= 20.0  # the clamp
    # The emulated device sleeps the profile's cost, plus the host's delay in waking it:
    # the error is a measurement (a loaded machine read 0.73), bounded by its clamp.
    assert 0.0 <= value(after, PREFIX + "cost_estimate_error_ratio") <= 10.0
    assert value(after, PREFIX + "profile_info", profile="t4",
                 reason="model config parameter hardware_profile") == 1.0

    def delta(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    # Every served request is in one batch and one SLA outcome; the refusals by reason.
    assert delta(PREFIX + "batch_size_sum") == 120
    assert 1 <= delta(PREFIX + "batch_size_count") <= 120
    assert delta(PREFIX + "padding_waste_ratio_count") == delta(PREFIX + "batch_size_count")
    assert delta(PREFIX + "sla_requests_total") == 120
    assert (delta(PREFIX + "sla_requests_total", outcome="met")
            + delta(PREFIX + "sla_requests_total", outcome="missed")) == 120
    assert delta(PREFIX + "sla_requests_total", sla_class="le1000ms") == 0  # all a minute
    # Each success once in request_duration; each dispatched request once in queue_duration.
    assert delta(PREFIX + "request_duration_seconds_count", sla_class="gt1000ms") == 120
    assert delta(PREFIX + "queue_duration_seconds_count", sla_class="gt1000ms") == 120
    assert 0.0 < delta(PREFIX + "queue_duration_seconds_sum") < delta(
        PREFIX + "request_duration_seconds_sum")
    assert delta(PREFIX + "rejected_requests_total", reason="invalid_input") == 5
    assert delta(PREFIX + "rejected_requests_total", reason="deadline_infeasible") == 5
    for counter in COUNTERS:
        assert delta(PREFIX + counter) >= 0
    assert set(GAUGES) <= {n[len(PREFIX):] for n in names}


def test_minilm_profile_chosen_without_nvml(server):
    samples = scrape(server)
    reasons = [dict(lab) for (n, lab), v in samples.items()
               if n == PREFIX + "profile_info" and dict(lab)["model"] == "minilm_explicit"]
    assert reasons == [{"model": "minilm_explicit", "model_instance": "minilm_explicit_0_0",
                        "profile": "cpu", "reason": "no NVML device: default"}]
