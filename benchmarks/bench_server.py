"""``make bench``'s server side: one tritonserver with explicit and native models
(``Bench``), its batch monitor, and the simulator's run of a segment beside it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence

from benchmarks import segment_stats as B
from benchmarks.bench_setup import (EXPLICIT, EXPLICIT_INTAKE, PEAK_CONCURRENCY, PEAK_EXTRA,
                                    PEAK_MEASURE_MS, PEAK_WINDOW_TS, QUICK_PEAK_MEASURE_MS, SEED,
                                    WAKE_COUNT_SETTLE_S, log)
from benchmarks.loadgen import LoadGenerator
from benchmarks.procinfo import cpu_s, find_stub
from operator_tools.benchmark_mode import POLICY_KEY, SERVE_LATE
from operator_tools.live import ModelControl, with_parameters
from operator_tools.measure import (PeriodicSampler, Sample, busy_series, inside, model_sampler,
                                    padding_waste, queue_gauges)
from operator_tools.perf_analyzer import run_request_rate
from scheduler_core.scheduler import Scheduler
from server_ops.intake_config import gather_config_json, hold_config_json
from server_ops.launcher import TritonServer
from sidecar.triton_metrics import MetricsParseError, fetch_url, model_sample_sum
from simulation import baselines
from simulation.simulator import simulate
from triton_backend.metric_catalog import WAKE_REQUESTS_METRIC


class BatchMonitor:
    """Every second: Triton's metrics and each watched model's batch statistics, stamped
    with time.monotonic_ns (the load generator's clock). Each ``watch`` starts a fresh
    sampler, so no sample of one set of models lands among another's; a missed sample
    only thins the series."""

    def __init__(self, server: TritonServer, period_s: float = 1.0):
        self.server, self.period_s = server, period_s
        self._sampler: PeriodicSampler | None = None

    def watch(self, models: list[str]) -> None:
        self.stop()
        if models:
            self._sampler = model_sampler(self.server.metrics_url,
                                          f"http://{self.server.http_url}", models,
                                          self.period_s, clock_ns=time.monotonic_ns,
                                          name="bench-monitor").start()

    def snapshot(self) -> list[Sample]:
        return list(self._sampler.samples) if self._sampler else []

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop(timeout_s=5)
            self._sampler = None


class Bench:
    def __init__(self, server: TritonServer, models: Sequence[str] = (),
                 explicit_intake: str = EXPLICIT_INTAKE, hand_over: int | None = None):
        """``models``: what ``server`` loads at its start (its --load-model arguments);
        ``explicit_intake``: the plugin's intake in every block, ``hand_over`` intake
        hold's hand-over (None: the shipped one); a variant other than the shipped default
        is named in the report's first lines."""
        self.server = server
        self.explicit_intake = explicit_intake
        self.hand_over = hand_over
        self.monitor = BatchMonitor(server)
        self.controls: dict[str, ModelControl] = {}
        self.base_configs: dict[str, dict] = {}
        self.started_models = tuple(models)
        # What is loaded now, and with which config (None: the repository's): what a
        # restart after a server crash brings back.
        self.live: dict[str, dict | None] = dict.fromkeys(models)
        self.lost = 0
        self.segments = 0
        self.server_crashes: list[dict] = []

    # models
    def control(self, model: str) -> ModelControl:
        if model not in self.controls:
            self.controls[model] = ModelControl(self.server.http_url, model, settle_s=0.3)
        return self.controls[model]

    def configure(self, model: str, params: dict[str, str],
                  native: B.NativeSetting | None = None,
                  max_batch_size: int | None = None) -> None:
        """Reload ``model`` with its config as the server first served it (the repository's
        config.pbtxt on disk when the run started, never a text of ours) plus ``params``,
        and for native a ``dynamic_batching`` section and optionally a max_batch_size."""
        ctl = self.control(model)
        if model not in self.base_configs:
            self.base_configs[model] = ctl.config()
        if model == EXPLICIT and self.explicit_intake != EXPLICIT_INTAKE:
            params = {**params, "intake": self.explicit_intake}
        config = with_parameters(self.base_configs[model], params)
        if params.get("intake") == "gather":
            config = gather_config_json(config)
        if native is not None:
            config["dynamic_batching"] = native.dynamic_batching()
        if max_batch_size is not None:
            config["max_batch_size"] = int(max_batch_size)
        elif model == EXPLICIT and self.hand_over:
            config = hold_config_json(config, self.hand_over)
        ctl.load(config)
        self.live[model] = config

    def load(self, model: str) -> None:
        """Load ``model`` with the config in the repository."""
        self.server.load_model(model)
        self.live[model] = None

    def unload(self, model: str) -> None:
        self.server.unload_model(model)
        self.live.pop(model, None)

    def server_died(self) -> bool:
        return self.server.process is not None and self.server.process.poll() is not None

    def restart(self) -> None:
        """Start the server again after it died, with every model as it was: tritonserver
        2.51's gRPC front end can crash when clients cancel at a high rate (docs/platform.md,
        results/tritonserver_sigsegv.md), which a bench's overload rungs do."""
        self.monitor.stop()
        self.server.stop()
        self.server.start()
        self.server.wait_ready()
        self.controls.clear()  # their URLs may be stale after a start on new ports
        for model in self.started_models:
            if model not in self.live:
                self.server.unload_model(model)
        for model, config in self.live.items():
            if config is None:
                self.server.load_model(model)
            else:
                self.control(model).load(config)

    def _queue_idle(self, model: str, timeout_s: float = 15.0) -> None:
        """Wait until the model holds no request (explicit: its queue-depth gauge; native:
        Triton's pending count), so one segment's backlog never lands in the next."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                gauges = queue_gauges(self.server.metrics_url, timeout_s=2.0)
            except (OSError, MetricsParseError):
                return
            if not any(value > 0 for (_, m), value in gauges.items() if m == model):
                return
            time.sleep(0.2)

    # one segment
    def segment(self, role: str, model: str, arrivals, duration_s: float, include_sla: bool,
                client_timeout_s: float, warmup_s: float = 0.0,
                busy: bool = False) -> B.SegmentStats:
        """Send ``arrivals`` (a warm-up of ``warmup_s`` seconds, then ``duration_s`` measured)
        and measure the window after the warm-up; ``busy``: also the per-second busy
        fraction (one more monitor sample after the run). A segment during which the server
        died is recorded in ``server_crashes``, and run once more on a restarted server."""
        stats, result = self._segment(role, model, arrivals, duration_s, include_sla,
                                      client_timeout_s, warmup_s, busy)
        if self.server_died():
            code = self.server.process.returncode
            self.server_crashes.append({
                "model": model, "role": role, "requests": len(result.records),
                "rate_rps": len(result.records) / max(1e-9, warmup_s + duration_s),
                "exit_code": code, "at": time.strftime("%H:%M:%S")})
            log(f"tritonserver died (exit code {code}) during a {role} segment of {model}; "
                "restarting it and running the segment again")
            self.restart()
            stats, result = self._segment(role, model, arrivals, duration_s, include_sla,
                                          client_timeout_s, warmup_s, busy)
            if self.server_died():
                raise RuntimeError(f"tritonserver died twice in one {role} segment of {model}")
        self.lost += sum(1 for r in result.records if r.outcome == "LOST")
        self.segments += 1
        return stats

    def _segment(self, role: str, model: str, arrivals, duration_s: float, include_sla: bool,
                 client_timeout_s: float, warmup_s: float, busy: bool):
        self._queue_idle(model)
        stub = find_stub(self.server.process.pid, model)
        server_pid = self.server.process.pid
        if busy:
            self.monitor.watch([model])
        box: list[float] = []
        cpu0 = (cpu_s(stub), cpu_s(server_pid))
        gen = LoadGenerator(self.server.grpc_url, model, clients=4, include_sla=include_sla,
                            client_timeout_s=client_timeout_s, seed=SEED)
        result = gen.run(arrivals, max_duration_s=warmup_s + duration_s,
                         drain_timeout_s=client_timeout_s + 5.0,
                         on_start=lambda t0: box.append(t0))
        cpu1 = (cpu_s(stub), cpu_s(server_pid))
        answered = max(1, sum(1 for r in result.records if r.response_s is not None))
        per_req = [None if None in (a, b) else (b - a) * 1e6 / answered
                   for a, b in zip(cpu0, cpu1)]
        series, waste = [], None
        if busy:
            time.sleep(1.05)  # one more sample closes the last second
            samples = self.monitor.snapshot()
            self.monitor.watch([])
            t0_ns = int((box[0] + warmup_s) * 1e9) if box else 0
            spans = [(t0_ns, t0_ns + int(duration_s * 1e9) + 1)]
            gauge = role == "explicit"
            series = inside(busy_series(samples, model, gauge), spans)
            waste = padding_waste(samples, model, spans) if gauge else None
        stats = B.measured_stats(role, result.window(warmup_s, warmup_s + duration_s),
                                 series, waste, per_req[0], per_req[1])
        return stats, result

    def success_count(self, model: str) -> int | None:
        """Requests ``model`` answered successfully: Triton's count (statistics API) less
        the plugin's own wake requests (intake hold; Triton counts them too). The plugin
        publishes its counters every control period (0.1 s): wait WAKE_COUNT_SETTLE_S."""
        return self.counts(model)[0]

    def counts(self, model: str) -> tuple[int | None, int | None]:
        """(``success_count``, Triton's count of ``model``'s ``execute()`` calls); None
        where the server did not answer."""
        import tritonclient.http as httpclient  # noqa: PLC0415
        time.sleep(WAKE_COUNT_SETTLE_S)
        client = httpclient.InferenceServerClient(self.server.http_url, network_timeout=30.0)
        try:
            stats = client.get_inference_statistics(model).get("model_stats", [])
            wakes = model_sample_sum(fetch_url(self.server.metrics_url, 30.0),
                                     WAKE_REQUESTS_METRIC, model)
            return (sum(int(m["inference_stats"]["success"]["count"]) for m in stats)
                    - int(wakes), sum(int(m["execution_count"]) for m in stats))
        except Exception:  # noqa: BLE001 - a missing figure only blanks one cell
            return None, None
        finally:
            client.close()

    def closed_loop_peak(self, model: str, input_data: str, measure_ms: int) -> dict:
        """perf_analyzer closed loop (gRPC, ``PEAK_CONCURRENCY`` in flight) on ``input_data``:
        throughput, P50/P99, and the stub's CPU per request answered and the requests per
        ``execute()`` call during the whole run (warm-up included; Triton's counts: on a
        host-bound loop the call size has two regimes, and the rate follows it,
        results/machine_split/). ``error`` when perf_analyzer failed."""
        self._queue_idle(model)
        stub = find_stub(self.server.process.pid, model)
        (n0, x0), c0 = self.counts(model), cpu_s(stub)
        try:
            r = run_request_rate(self.server.grpc_url, model, input_data, 0, measure_ms,
                                 protocol="grpc", extra=PEAK_EXTRA, timeout_s=180,
                                 concurrency=PEAK_CONCURRENCY)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            return {"error": " / ".join(lines[-2:])[:300] or repr(exc)}
        (n1, x1), c1 = self.counts(model), cpu_s(stub)
        answered = None if None in (n0, n1) else n1 - n0
        cpu_us = (None if None in (c0, c1) or not answered else (c1 - c0) * 1e6 / answered)
        per_call = (None if None in (x0, x1) or not answered or x1 <= x0
                    else answered / (x1 - x0))
        self.segments += 1
        return {"throughput_rps": r.throughput, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                "requests": answered, "stub_cpu_us_per_request": cpu_us,
                "requests_per_call": per_call,
                "concurrency": PEAK_CONCURRENCY, "error": None}

# -- simulation ---------------------------------------------------------------------------

def sim_segment(role: str, prof, arrivals, duration_s: float, warmup_s: float,
                native: B.NativeSetting | None = None) -> B.SegmentStats:
    """The simulator on the same arrivals, measured over the same window."""
    s = prof.scheduler
    if role == "explicit":
        policy = Scheduler.from_profile(prof, prof.emulation.time_scale)
    else:
        policy = baselines.TritonDynamicBatcher(s.max_batch_size, native.max_queue_delay_us,
                                                native.preferred_batch_sizes)
    result = simulate(policy, arrivals, prof.cost_model, prof.emulation.cost_mode,
                      prof.emulation.time_scale, name=role)
    return B.simulated_stats(role, result, duration_s, warmup_s)


def peak_window_ms(quick: bool, time_scale: float) -> int:
    """perf_analyzer's measurement window for a closed-loop peak at ``time_scale``."""
    base = QUICK_PEAK_MEASURE_MS if quick else PEAK_MEASURE_MS
    return int(round(base * max(1.0, time_scale / PEAK_WINDOW_TS)))


def explicit_peak(bench: Bench, params: dict[str, str], input_data: str,
                  measure_ms: int, intake: str | None = None) -> dict:
    """The explicit model's closed-loop peak with ``control.infeasible_policy=serve_late``
    (perf_analyzer stops at the first refused request), with ``intake`` if given; its
    config restored after."""
    if intake:
        peak = explicit_peak(bench, {**params, "intake": intake}, input_data, measure_ms)
        bench.configure(EXPLICIT, params)
        return {**peak, "intake": intake}
    bench.configure(EXPLICIT, {**params, POLICY_KEY: SERVE_LATE})
    try:
        return bench.closed_loop_peak(EXPLICIT, input_data, measure_ms)
    finally:
        bench.configure(EXPLICIT, params)


def peak_text(peak: dict) -> str:
    if peak.get("error"):
        return f"failed ({peak['error']})"
    return f"{peak['throughput_rps']:.0f} req/s (p50 {peak['p50_ms']:.1f} ms)"
