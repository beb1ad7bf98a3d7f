"""``ExplicitModel``: the ``*_explicit`` models, which own their request queue.

Lifecycle, as the Python backend calls it:

``initialize(args)``
    Read the parameters (``ModelSettings``; an unknown key or a bad value refuses the
    load), choose the profile, the executor (in process, or BLS to ``inner_model``) and the
    intake, and start the threads that intake needs.
``execute(requests)``
    Decode each request (an invalid one is answered INVALID_ARG at once) and hand the rest
    to the ``Dispatcher``. With ``intake: hold`` (the default) this call decides, runs and
    answers its own requests and returns their responses, so a stub crash leaves them to
    Triton; with release or gather it queues them for the scheduler thread and returns.
``finalize()``
    Stop taking requests, serve what is queued, fail what is left, stop the threads.

Every request ends with exactly one response or one error.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
import traceback

import triton_python_backend_utils as pb_utils

from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler
from sidecar.sampler import HEALTH_VALUE, SampleFile, Sidecar, usable

from .bls import BLSExecutor, GenericBLSExecutor
from .control_metrics import ControlMetrics
from .metric_catalog import SIDECAR_DISABLED
from .dispatcher import Dispatcher, Pending, reply
from .executors import EmulatedDevice
from .intake import make_intake
from .waker import Waker
from .load_calibration import calibrate_at_load
from .model_loading import (LoadRefused, check_inner_model, choose_intake, inner_contract,
                            instance_index, instance_placement, is_embedding_contract,
                            load_profile, make_executor, queue_prefetches)
from .model_settings import SHUTDOWN_DRAIN_S, ModelSettings, SettingsError
from .request_decoding import RequestError
from .responder import Responder
from .hold_driver import HoldDriver
from .responses import check_numpy, decode, decode_all, error, placeholder_inputs
from .timeline import TIMELINE_ENV, Timeline

# Operators' hot-path profiling: with this environment variable naming a folder, an explicit
# model profiles its execute() calls, its scheduler thread and its responder thread
# (cProfile, on each thread's CPU clock) and writes <folder>/<model>.<execute|loop|respond>
# .pstats when it unloads. Off unless set: it slows the stub.
CPROFILE_ENV = "EXPLICIT_BATCHING_CPROFILE_DIR"
METRICS_URL_ENV = "EXPLICIT_BATCHING_METRICS_URL"
# The in-process sidecar scrapes Triton's /metrics page every 5th perception period (1 s
# at 200 ms): the plugin uses only the scrape's health, and each scrape made the server
# render the whole page and the stub parse it (py-spy at 1,300 req/s, flat profile: 5 % of
# the stub's samples at every period). NVML is still read every period.
SIDECAR_SCRAPE_EVERY = 5
WAKE_REQUEST_ID = "explicit-batching-wake"  # waker.Waker's requests
WAKE_STOP_WAIT_S = 2.0  # at unload, for the wake requests still under way


class ExplicitModel:
    """A Python-backend model that owns its request queue (explicit-control batching)."""

    def initialize(self, args):
        check_numpy(args["model_name"])
        try:
            self._initialize(args)
        except (SettingsError, LoadRefused) as exc:
            raise pb_utils.TritonModelException(str(exc)) from None

    def _initialize(self, args) -> None:
        self.model_name = args["model_name"]
        self.config = json.loads(args["model_config"])
        settings = self.settings = ModelSettings.from_model_config(self.model_name, self.config)
        inner = settings.inner_model
        self.placement = instance_placement(args, settings)
        default_profile = "cpu" if settings.executor == "minilm" else "t4"
        warn = pb_utils.Logger.log_warn
        self.profile, why = load_profile(args, settings, default_profile,
                                         self.placement.nvml_index, warn)
        self.contract = None  # None: the INPUT_IDS -> EMBEDDING contract
        if inner:
            check_inner_model(args, settings)
            contract = inner_contract(args, self.config, settings)
            if is_embedding_contract(contract):
                self.executor = BLSExecutor(inner)
            else:
                self.contract = contract
                self.executor = GenericBLSExecutor(inner, contract)
        else:
            self.executor, _ = make_executor(args, settings, self.placement, warn,
                                             self.profile)
        # Real compute measures its own cost table before serving (the profile's cost
        # model is only the seed); see load_calibration.
        self.profile, _, cost_note = calibrate_at_load(
            self.profile, self.executor, self.placement.on_gpu,
            f"{self.placement.device}" + (f" ({why})" if self.placement.on_gpu else ""))
        pb_utils.Logger.log_info(f"{self.model_name}: {cost_note}")
        # Only the emulated device is slowed by the profile's time scale.
        time_scale = (self.profile.emulation.time_scale
                      if isinstance(self.executor, EmulatedDevice) else 1.0)
        # Each instance's controller draws its own jittered decision periods
        # (control.period_jitter): seeded by its index in the instance group.
        self.scheduler = Scheduler.from_profile(self.profile, time_scale,
                                                seed=instance_index(args))
        self._control_period_s = self.profile.control.control_period_ms / 1000.0
        self._ids = itertools.count()
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # the scheduler thread waits on it
        # CPU seconds of the stub's threads (execute(), the scheduler loop, the
        # responders), logged at unload: where the per-request host cost goes.
        self._thread_cpu_s = {"execute": 0.0, "loop": 0.0, "respond": 0.0}
        # The intake (intake.py): how execute() hands its requests over, a named part.
        self.intake = make_intake(
            choose_intake(self.config, settings, self.model_name), lock, self._cond,
            grace_s=settings.gather_grace_us / 1e6,
            default_sla_ms=self.profile.scheduler.default_sla_ms)
        self.metrics = ControlMetrics(self.model_name, self.profile.name, why,
                                      args.get("model_instance_name", ""))
        self._profile_dir = os.environ.get(CPROFILE_ENV) or None
        self._profilers = {}
        if self._profile_dir:
            import cProfile  # noqa: PLC0415 - only when asked for
            # Each profiler runs on one thread: timed by that thread's CPU clock, so the
            # figures are CPU seconds (scripts/host_ledger.py), not wall time.
            self._profilers = {name: cProfile.Profile(time.thread_time)
                               for name in ("execute", "loop", "respond")}
        self._start_sidecar()
        threaded = self.intake.threaded
        # An intake that is not threaded (hold) decides, runs and answers inside execute()
        # (the calling thread): no scheduler thread, no responders, no hand-over.
        self._responder = Responder(settings.responder_threads, self._profilers.get("respond"),
                                    self._add_respond_cpu) if threaded else None
        self.dispatcher = Dispatcher(
            self.model_name, self.scheduler, self._cond, self.intake, self.metrics,
            self.executor, self.contract, self._apply_perception, self._responder,
            self._control_period_s, settings.loop_fault_token)
        self._thread = None
        if threaded:
            self._thread = threading.Thread(target=self._run_loop, name="explicit-scheduler",
                                            daemon=True)
            self._thread.start()
        self._metrics_stop = threading.Event()
        self._metrics_thread = None
        if not threaded:
            self._metrics_thread = threading.Thread(target=self._metrics_loop, daemon=True,
                                                    name="explicit-metrics")
            self._metrics_thread.start()
        self._start_waker()
        self._hold = None
        if not threaded:
            self._hold = HoldDriver(
                self.model_name, self.dispatcher, self.intake,
                lambda requests: decode_all(requests, self.contract),
                self.profile.scheduler.default_sla_ms,
                Timeline(self.model_name, os.environ.get(TIMELINE_ENV) or None),
                is_wake=self._is_wake if self._waker is not None else None)
        pb_utils.Logger.log_info(
            f"{self.model_name}: explicit batching on profile '{self.profile.name}' "
            f"(chosen by {why}; {self.profile.source}); executor={type(self.executor).__name__}"
            f"{' -> ' + inner if inner else ''}; intake={self.intake.name}; "
            f"sidecar={self._sidecar_mode}; "
            f"placement: {self.placement.why}")

    def _start_sidecar(self) -> None:
        """Parameter ``sidecar``: "thread" (default: in this process), "off", or
        "file:PATH" (samples from a separate ``python -m sidecar`` process)."""
        mode = self.settings.sidecar
        self._sidecar = None
        self._sidecar_max_age_s = 5 * self.profile.control.perception_period_ms / 1000.0
        if mode == "thread":
            url = self.settings.metrics_url or os.environ.get(METRICS_URL_ENV, "")
            self._sidecar = Sidecar(url or None,
                                    self.profile.control.perception_period_ms / 1000.0,
                                    log=pb_utils.Logger.log_info,
                                    nvml_index=self.placement.nvml_index,
                                    scrape_every=SIDECAR_SCRAPE_EVERY).start()
            mode = f"thread ({url or 'NVML only'})"
        elif mode.startswith("file:"):
            self._sidecar = SampleFile(mode[len("file:"):])
        self._sidecar_mode = mode

    def _start_waker(self) -> None:
        """intake hold, where Triton's queue cannot prefetch: wake requests end the
        batcher's lost-wake-up stalls (waker.Waker; opt-in, see WAKE_AFTER_US)."""
        wake_after_us = self.settings.wake_after_us
        if wake_after_us > 0 and (self.intake.threaded or queue_prefetches(self.config)):
            pb_utils.Logger.log_warn(
                f"{self.model_name}: parameter 'wake_after_us' ignored: it serves intake hold "
                "behind a queue that cannot prefetch (a default_queue_policy or priority levels)")
            wake_after_us = 0
        self._wake_inputs = placeholder_inputs(self.config) if wake_after_us > 0 else []
        self._waker = (Waker(wake_after_us / 1e6, self._send_wake).start()
                       if wake_after_us > 0 else None)

    def _apply_perception(self, now: float) -> float:
        """Feed the latest sidecar sample to the scheduler (never blocks; under the lock).
        Returns the sidecar health for the metric (-1 when there is no sidecar)."""
        if self._sidecar is None:
            return SIDECAR_DISABLED
        sample = self._sidecar.latest()
        ok = usable(sample, now, self._sidecar_max_age_s)
        self.scheduler.set_perception_health(ok)
        if ok and sample.utilization is not None:
            self.scheduler.set_external_utilization(sample.utilization, sample.taken_s, "nvml")
        return HEALTH_VALUE.get(sample.health, 0.0) if sample is not None else 0.0

    # -- arrivals (Triton's thread) ---------------------------------------------------
    def execute(self, requests):
        cpu0 = time.thread_time()
        profiler = self._profilers.get("execute")
        if profiler is not None:
            profiler.enable()
        try:
            return (self._execute_queued(requests) if self.intake.threaded
                    else self._execute_held(requests))
        finally:
            if profiler is not None:
                profiler.disable()
            self._thread_cpu_s["execute"] += time.thread_time() - cpu0

    def _decode_call(self, requests, arrival: float) -> tuple[list[QueuedRequest], float]:
        """A threaded intake's call: its valid requests as queued requests (an invalid one
        is answered INVALID_ARG at once), and the smallest SLA among them."""
        queued: list[QueuedRequest] = []
        min_sla_ms = math.inf
        for request in requests:
            handle = Pending(request, request.get_response_sender(), None)
            try:
                decoded = self._decode(request)
            except RequestError as exc:
                self.metrics.on_rejected("invalid_input")
                reply(handle, error(str(exc), pb_utils.TritonError.INVALID_ARG))
                continue
            handle.input_ids = decoded.input_ids
            handle.decoded = decoded if self.contract else None
            sla_ms = decoded.sla_ms or self.profile.scheduler.default_sla_ms
            min_sla_ms = min(min_sla_ms, sla_ms)
            queued.append(QueuedRequest(next(self._ids), int(decoded.input_ids.size),
                                        arrival, sla_ms, handle))
        return queued, min_sla_ms

    def _decode(self, request):
        return decode(request, self.contract)

    def _execute_queued(self, requests):
        """A threaded intake (release, gather): queue the call's requests for the scheduler
        thread and return (gather: once the batch in flight has ended)."""
        now = time.monotonic()
        queued, min_sla_ms = self._decode_call(requests,
                                                  self.intake.call_arrival(now, len(requests)))
        generation = self.intake.generation()  # a release from now on lets it return
        self.dispatcher.submit(queued, now)
        self.intake.after_queued(len(requests), min_sla_ms, generation)
        return None

    def _execute_held(self, requests):
        """intake hold: ``hold_driver.HoldDriver`` decides, runs and answers this call's
        requests in this thread and returns their answers (the waker hears of the call)."""
        waker = self._waker
        if waker is None:
            return self._hold.execute(requests)
        waker.call_started()
        responses = self._hold.execute(requests)
        waker.call_returned(time.monotonic(),
                            answered_real=self._hold.last_wakes < len(requests))
        return responses

    @staticmethod
    def _is_wake(request) -> bool:
        return request.request_id() == WAKE_REQUEST_ID

    def _send_wake(self) -> bool:
        """waker.Waker's wake request: into this model, answered (empty) by the next call;
        False when Triton refused it (a full queue) or it failed."""
        self.metrics.on_event("wake_requests_total")
        response = pb_utils.InferenceRequest(
            model_name=self.model_name, inputs=self._wake_inputs, requested_output_names=[],
            request_id=WAKE_REQUEST_ID).exec()
        return not response.has_error()

    # -- threads ----------------------------------------------------------------------
    def _run_loop(self) -> None:
        """The scheduler thread (release, gather)."""
        profiler = self._profilers.get("loop")
        if profiler is not None:
            profiler.enable()  # this thread only
        try:
            self.dispatcher.run_thread()
        finally:
            if profiler is not None:
                profiler.disable()
            self._thread_cpu_s["loop"] += time.thread_time()

    def _add_respond_cpu(self, seconds: float) -> None:
        with self._cond:
            self._thread_cpu_s["respond"] += seconds

    def _metrics_loop(self) -> None:
        """intake hold: perception is applied here every control period, and the control
        metrics are published here (once per METRICS_PUBLISH_PERIOD_S), not from
        execute(): a flush is tens of messages to the server, time the call's requests
        would wait for. Touches no request."""
        while not self._metrics_stop.wait(self._control_period_s):
            try:
                now = time.monotonic()
                with self._cond:
                    health = self._apply_perception(now)
                self.dispatcher.flush_metrics_if_due(now, health)
            except Exception:  # the metrics must never take the model down
                pb_utils.Logger.log_warn(f"{self.model_name}: metrics flush failed:\n"
                                         f"{traceback.format_exc()}")

    def finalize(self):
        """Stop accepting, serve what is queued (flush), then fail anything left."""
        if self._waker is not None:  # no wake request may be under way at unload
            self._waker.stop(timeout_s=WAKE_STOP_WAIT_S)
        with self._cond:
            self.dispatcher.stopping = True
            self._cond.notify_all()
            self.intake.stop_locked()
        if self._thread is not None:  # intake hold has none: its calls answered everything
            self._thread.join(timeout=SHUTDOWN_DRAIN_S)
        self._metrics_stop.set()
        if self._metrics_thread is not None:
            self._metrics_thread.join(timeout=SHUTDOWN_DRAIN_S)
        if isinstance(self._sidecar, Sidecar):
            self._sidecar.stop()
        self.metrics.close()
        self.dispatcher.drain()
        if self._responder is not None:  # sends everything queued, then ends
            self._responder.stop(SHUTDOWN_DRAIN_S)
        for name, profiler in self._profilers.items():
            os.makedirs(self._profile_dir, exist_ok=True)
            profiler.dump_stats(os.path.join(self._profile_dir, f"{self.model_name}.{name}.pstats"))
        cpu = " ".join(f"{k}={v:.2f}" for k, v in self._thread_cpu_s.items())
        if self._hold is not None:
            self._hold.timeline.flush()
        pb_utils.Logger.log_info(
            f"{self.model_name}: unloading; thread CPU s: {cpu}; "
            f"requests={self.dispatcher.arrivals};{self.intake.summary()}"
            + (self._hold.timeline.summary() if self._hold is not None else "")
            + (self._waker.summary() if self._waker is not None else ""))
