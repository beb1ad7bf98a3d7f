"""``ExplicitModel``: the ``*_explicit`` models, which own their request queue.

Lifecycle, as the Python backend calls it:

``initialize(args)``
    Read the parameters (``ModelSettings``; an unknown key or a bad value refuses the
    load), choose the profile, the executor (in process, or BLS to ``inner_model``) and the
    intake, and start the threads that intake needs.
``execute(requests)``
    Hand the call to the intake's driver. With ``intake: hold`` (the default,
    ``hold_driver.HoldDriver``) the call decides, runs and answers its own requests and
    returns their responses, so a stub crash leaves them to Triton; with release or gather
    (``threaded_driver.ThreadedDriver``) it queues them for the scheduler thread and
    returns. Both carry out the engine's steps through one ``runner.Runner``.
``finalize()``
    Stop taking requests, serve what is queued, fail what is left, stop the threads.

Every request ends with exactly one response or one error.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import traceback

import triton_python_backend_utils as pb_utils

from scheduler_core.engine import Engine
from scheduler_core.scheduler import Scheduler
from sidecar.sampler import SampleFile, Sidecar

from .answers import Answers
from .bls import BLSExecutor, GenericBLSExecutor
from .control_metrics import ControlMetrics
from .decode import check_numpy, placeholder_inputs
from .executors import EmulatedDevice
from .hold_driver import HoldDriver
from .intake import make_intake
from .load_calibration import calibrate_at_load
from .model_loading import (LoadRefused, check_embedding_width, check_inner_model,
                            choose_intake, inner_contract, instance_index,
                            instance_placement, is_embedding_contract, load_profile,
                            make_executor, queue_prefetches)
from .model_settings import REAL_EXECUTORS, SHUTDOWN_DRAIN_S, ModelSettings, SettingsError
from .responder import Responder
from .runner import Runner
from .sidecar_sample import Perception
from .threaded_driver import ThreadedDriver
from .timeline import TIMELINE_ENV, Timeline
from .waker import WAKE_REQUEST_ID, Waker

# Operators' hot-path profiling: with this environment variable naming a folder, an explicit
# model profiles its execute() calls, its scheduler thread and its responder thread
# (cProfile, on each thread's CPU clock) and writes <folder>/<model>.<execute|loop|respond>
# .pstats when it unloads. Off unless set: it slows the stub.
CPROFILE_ENV = "EXPLICIT_BATCHING_CPROFILE_DIR"
METRICS_URL_ENV = "EXPLICIT_BATCHING_METRICS_URL"
# The in-process sidecar scrapes Triton's /metrics page every 25th perception period (5 s
# at 200 ms; after a failed scrape, every period): the plugin uses only the scrape's
# health, and a scrape costs the server and the stub a whole page (docs/defaults.md).
# NVML is still read every period.
SIDECAR_SCRAPE_EVERY = 25
# The metrics thread's shortest sleep: a deadline it reaches a moment early is looked at
# again this much later, not in a spin.
METRICS_MIN_WAIT_S = 0.001
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
        default_profile = "cpu" if settings.executor in REAL_EXECUTORS else "t4"
        warn = pb_utils.Logger.log_warn
        self.profile, why = load_profile(args, settings, default_profile,
                                         self.placement.nvml_index, warn)
        self.contract = None  # None: the INPUT_IDS -> EMBEDDING contract
        if inner:
            check_inner_model(args, settings)
            contract = inner_contract(args, self.config, settings,
                                      self.profile.scheduler.max_batch_size)
            if is_embedding_contract(contract):
                self.executor = BLSExecutor(inner)
            else:
                self.contract = contract
                self.executor = GenericBLSExecutor(inner, contract)
        else:
            self.executor, _ = make_executor(args, settings, self.placement, warn,
                                             self.profile)
            check_embedding_width(self.model_name, self.config, self.executor)
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
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # guards the engine; threads wait on it
        # CPU seconds of the stub's threads (execute(), the scheduler loop, the
        # responders), logged at unload: where the per-request host cost goes.
        self._thread_cpu_s = {"execute": 0.0, "loop": 0.0, "respond": 0.0}
        # The intake (intake.py): how execute() hands its requests over, a named part.
        self.intake = make_intake(
            choose_intake(self.config, settings, self.model_name), lock, self._cond,
            grace_s=settings.gather_grace_ms / 1e3,
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
        self.runner = Runner(
            self.model_name, Engine(self.scheduler), self._cond, Answers(self.metrics),
            self.metrics, self.executor, self.contract,
            Perception(self._sidecar, self._sidecar_max_age_s), settings.loop_fault_token,
            batch_timeout_floor_s=settings.batch_timeout_floor_ms / 1000.0,
            # intake hold: each sidecar sample is applied as it is taken (_sample_taken),
            # or by the metrics thread (_metrics_loop); a sample lives a perception
            # period, so execute()'s steps, thousands a second, need not apply it again
            step_perception=None if self.intake.threaded else Perception(None, 0.0))
        if isinstance(self._sidecar, Sidecar):
            self._sidecar.start(None if self.intake.threaded else self._sample_taken)
        self._metrics_stop = threading.Event()
        # Every intake: the watchdog; intake hold: perception and the metrics' publishing.
        self._metrics_thread = threading.Thread(target=self._metrics_loop, daemon=True,
                                                name="explicit-metrics")
        self._metrics_thread.start()
        self._waker = None
        default_sla_ms = self.profile.scheduler.default_sla_ms
        if self.intake.threaded:  # a scheduler thread decides; responder threads answer
            self.driver = ThreadedDriver(
                self.runner, self.intake,
                Responder(settings.responder_threads, self._profilers.get("respond"),
                          self._add_respond_cpu),
                default_sla_ms, self._control_period_s, self._profilers.get("loop"),
                decode_fault_token=settings.decode_fault_token)
        else:  # execute() decides, runs and answers: no scheduler thread, no responders
            self._start_waker()
            self.driver = HoldDriver(
                self.runner, self.intake, default_sla_ms,
                Timeline(self.model_name, os.environ.get(TIMELINE_ENV) or None),
                waker=self._waker, decode_fault_token=settings.decode_fault_token)
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
                                    scrape_every=SIDECAR_SCRAPE_EVERY)  # started after the runner
            mode = f"thread ({url or 'NVML only'})"
        elif mode.startswith("file:"):
            self._sidecar = SampleFile(mode[len("file:"):])
        self._sidecar_mode = mode

    def _start_waker(self) -> None:
        """intake hold, where Triton's queue cannot prefetch: wake requests end the
        batcher's lost-wake-up stalls (waker.Waker; opt-in, see WAKE_AFTER_MS)."""
        wake_after_ms = self.settings.wake_after_ms
        if wake_after_ms > 0 and (self.intake.threaded or queue_prefetches(self.config)):
            pb_utils.Logger.log_warn(
                f"{self.model_name}: parameter 'wake_after_ms' ignored: it serves intake hold "
                "behind a queue that cannot prefetch (a default_queue_policy or priority levels)")
            wake_after_ms = 0
        self._wake_inputs = placeholder_inputs(self.config) if wake_after_ms > 0 else []
        self._waker = (Waker(wake_after_ms / 1e3, self._send_wake).start()
                       if wake_after_ms > 0 else None)

    # -- arrivals (Triton's thread) ---------------------------------------------------
    def execute(self, requests):
        cpu0 = time.thread_time()
        profiler = self._profilers.get("execute")
        if profiler is not None:
            profiler.enable()
        try:
            return self.driver.execute(requests)
        finally:
            if profiler is not None:
                profiler.disable()
            self._thread_cpu_s["execute"] += time.thread_time() - cpu0

    def _send_wake(self) -> bool:
        """waker.Waker's wake request: into this model, answered (empty) by the next call;
        False when Triton refused it (a full queue) or it failed."""
        self.metrics.on_event("wake_requests_total")
        response = pb_utils.InferenceRequest(
            model_name=self.model_name, inputs=self._wake_inputs, requested_output_names=[],
            request_id=WAKE_REQUEST_ID).exec()
        return not response.has_error()

    # -- threads ----------------------------------------------------------------------
    def _add_respond_cpu(self, seconds: float) -> None:
        with self._cond:
            self._thread_cpu_s["respond"] += seconds

    def _sample_taken(self, _sample) -> None:
        """intake hold, the in-process sidecar's sink: its sample reaches the engine as it
        is taken, on the sidecar's thread (the metrics thread need not wake for it)."""
        with self._cond:
            self.runner.perceive(time.monotonic())

    def _metrics_loop(self) -> None:
        """The watchdog (``Watchdog.check``: a hung batch's requests answered INTERNAL);
        with intake hold also perception and the control metrics (once per
        METRICS_PUBLISH_PERIOD_S), not from execute(): a flush is tens of messages to the
        server, time the call's requests would wait for. It wakes when one of these is due
        (``Runner.metrics_due_in_s``; a sample file's each perception period), not every
        control period: a wake-up costs the stub CPU whatever it does (docs/defaults.md)."""
        publish = not self.intake.threaded  # the scheduler thread perceives and publishes
        perceive_every_s = (self.profile.control.perception_period_ms / 1000.0
                            if publish and isinstance(self._sidecar, SampleFile) else math.inf)
        wait_s = 0.0
        while not self._metrics_stop.wait(wait_s):
            try:
                now = time.monotonic()
                self.runner.watchdog.check(now)
                if publish:
                    with self._cond:
                        health = self.runner.perceive(now)
                    self.runner.flush_metrics_if_due(now, health)
                wait_s = max(METRICS_MIN_WAIT_S, min(
                    perceive_every_s, self.runner.metrics_due_in_s(time.monotonic(), publish)))
            except Exception:  # the metrics must never take the model down
                wait_s = self._control_period_s
                pb_utils.Logger.log_warn(f"{self.model_name}: metrics flush failed:\n"
                                         f"{traceback.format_exc()}")

    def finalize(self):
        """Stop accepting, serve what is queued (flush), then fail anything left."""
        if self._waker is not None:  # no wake request may be under way at unload
            self._waker.stop(timeout_s=WAKE_STOP_WAIT_S)
        with self._cond:
            self.runner.stopping = True
            self._cond.notify_all()
        self.driver.stop(SHUTDOWN_DRAIN_S)  # the threaded driver serves what is queued
        self.runner.timeouts.stop(SHUTDOWN_DRAIN_S)
        self._metrics_stop.set()
        if self._metrics_thread is not None:
            self._metrics_thread.join(timeout=SHUTDOWN_DRAIN_S)
        if isinstance(self._sidecar, Sidecar):
            self._sidecar.stop()
        self.runner.deferred.run_all()  # the last batches' bookkeeping, before the counts go
        self.metrics.close()
        self.runner.refuse_queued("unloaded", "model unloaded before the request ran")
        self.driver.close(SHUTDOWN_DRAIN_S)  # the responders send everything
        self._thread_cpu_s["loop"] += getattr(self.driver, "cpu_s", 0.0)
        for name, profiler in self._profilers.items():
            os.makedirs(self._profile_dir, exist_ok=True)
            profiler.dump_stats(os.path.join(self._profile_dir, f"{self.model_name}.{name}.pstats"))
        cpu = " ".join(f"{k}={v:.2f}" for k, v in self._thread_cpu_s.items())
        pb_utils.Logger.log_info(
            f"{self.model_name}: unloading; thread CPU s: {cpu}; "
            f"requests={self.runner.arrivals};{self.intake.summary()}"
            + self.driver.summary()
            + (self._waker.summary() if self._waker is not None else ""))
