"""Per-hardware profiles: typed, frozen, validated once.

A profile is one YAML file (``model_repository/<model>/profiles/<name>.yaml``) with three
sections:

``cost_model``
    What a batch costs on this hardware (milliseconds). The emulated device executes
    exactly this model; the scheduler uses it as the seed of its online estimate.
``emulation``
    Settings that only the *emulated* device reads (time scale, padded or ragged cost).
``scheduler``
    Batching parameters (window, limits, SLA defaults).

Every error names the file, the key and the bad value, so an operator can fix a
profile from the log line alone. Files are read with ``yaml.safe_load`` only.
"""

from __future__ import annotations

from dataclasses import dataclass


class ProfileError(ValueError):
    """A profile file is missing, unreadable or holds a bad value. The message is bounded
    (it reaches logs and the model-load API's reply)."""

    MAX_MESSAGE_CHARS = 1000

    def __init__(self, message: str):
        if len(message) > self.MAX_MESSAGE_CHARS:
            message = message[:self.MAX_MESSAGE_CHARS] + " [...]"
        super().__init__(message)


@dataclass(frozen=True)
class CostModelConfig:
    """latency_ms = fixed_ms + per_sequence_ms*b + per_token_ms*T + per_token_squared_ms*S,
    or, when ``table`` is given, the measured table instead of the formula.

    T is the number of tokens the device processes and S the sum of squared sequence
    lengths (attention); both follow the cost mode (padded: every sequence counts as the
    batch's longest member; ragged: its own length).

    ``table``: measured cells ``(batch size, length in tokens, milliseconds)`` of a batch
    of equal-length sequences (``scheduler_core.cost_table``: interpolated between cells,
    extrapolated past them). In YAML a list of ``[batch, length, ms]`` triples or of
    ``{batch:, length:, ms:}`` mappings (the form ``explicit-batching calibrate`` and
    ``../shared/gpu/h200_minilm_costs.json`` write). A ragged batch is looked up at its
    mean length. ``table_source`` says where the cells come from (measured on which
    device, or emulated).
    """

    fixed_ms: float = 1.0
    per_sequence_ms: float = 0.0
    per_token_ms: float = 0.01
    per_token_squared_ms: float = 0.0
    table: tuple[tuple[int, int, float], ...] = ()
    table_source: str = ""


@dataclass(frozen=True)
class EmulationConfig:
    """How the emulated device turns the cost model into wall time."""

    cost_mode: str = "padded"
    # One uniform factor that slows the whole emulated device (and, in benchmarks,
    # the SLAs alike) so a 2-core machine can drive it. 1.0 = real hardware speed.
    time_scale: float = 1.0


@dataclass(frozen=True)
class SchedulerConfig:
    """Batching parameters of an explicit-control deployment."""

    max_batch_size: int = 32
    max_batch_tokens: int = 16384  # padded tokens (batch size x longest member)
    # The plugin's own queue bound (requests it holds; past it "queue full"). Not
    # Triton's dynamic_batching max_queue_size, which bounds Triton's queue in front.
    max_queued_requests: int = 4096
    default_sla_ms: float = 200.0
    # Elastic window: adjusted = base * (1 + alpha*(1-util)^2 - beta*delay_variance),
    # clamped to [min_window_ms, max_window_ms].
    base_window_ms: float = 5.0
    min_window_ms: float = 0.0
    max_window_ms: float = 50.0
    alpha: float = 0.2
    beta: float = 0.1
    # Worth-its-wait rule: with the device free, a partial batch of n requests waits (at
    # most the elastic window) only while n < wait_ms_per_saved_device_ms * arrival_rate *
    # batch overhead (fixed_ms): waiting ~1/rate for the next arrival costs the n queued
    # requests n/rate ms in all, and the newcomer saves one batch's fixed cost of device
    # time. This many ms of summed waiting are traded for one ms of device time; 0 =
    # never wait while the device is free (Triton's max_queue_delay 0).
    wait_ms_per_saved_device_ms: float = 1.0
    # Host time one more batch adds to a held call (wall ms, not time-scaled): its
    # decision and its executor call (docs/defaults.md).
    # A split pays only where it saves more device time than this beside the launch, so
    # where the device is nearly free (a host-bound load) a hand-over runs whole.
    batch_host_ms: float = 0.3
    # Sliding window over which utilisation, arrival rate and delay variation are measured.
    perception_window_ms: float = 1000.0


@dataclass(frozen=True)
class ControlConfig:
    """The three-layer explicit control of the design (perception, decision, execution)."""

    # false: default batching only (FIFO, elastic window) - the cold-start baseline.
    enabled: bool = True
    # Layer periods. Perception (observations) and decision (zone) run on the caller's
    # clock; the execution layer acts on every scheduling step.
    perception_period_ms: float = 200.0
    control_period_ms: float = 100.0
    # Several controllers on one load (instance_group count N, server replicas) that see
    # the same inputs decide in step and move together (coupled oscillation). Each
    # decision period, and each zone exit's dwell, is drawn from control_period_ms (or
    # min_dwell_ms) * (1 +/- period_jitter), seeded per controller, and the window follows the elastic window through a first-order filter
    # with time constant window_time_constant_ms (each decision moves it 1 - exp(-gap / tau)
    # of the way). 0 and 0: one unsmoothed controller, as before.
    period_jitter: float = 0.0
    window_time_constant_ms: float = 0.0
    # Zone indicators: at or below *_safe an indicator is safe, at or above *_danger it is
    # in danger, in between in the no-man's land (defaults: the design's table).
    utilization_safe: float = 0.50
    utilization_danger: float = 0.85
    queue_depth_safe: float = 5.0
    queue_depth_danger: float = 15.0
    p99_cv_safe: float = 0.10
    p99_cv_danger: float = 0.30
    # "all": explicit control when all three indicators are past their safe bound (the
    # design's rule); "weighted": when the weighted pressure score reaches nml_score.
    entry_mode: str = "all"
    weight_utilization: float = 0.5
    weight_queue_depth: float = 0.3
    weight_p99_cv: float = 0.2
    nml_score: float = 0.30
    # Danger when the weighted pressure score reaches this (the design's 0.78).
    danger_zone_threshold: float = 0.78
    # Batching in the safe zone: "fifo" (Triton's default dynamic batching: the queue's
    # prefix), "length_aware" (the explicit batch former: urgency order, compute-aware
    # splitting, reserved capacity), or "auto": length_aware where the device pays for
    # padding (cost_mode padded), fifo where it does not (ragged). In the simulator, FIFO
    # batches on a padded device with a long-tailed length mix wasted enough device time
    # to push utilisation into the danger zone from 40 % load on.
    safe_zone_batching: str = "auto"
    # The batch formers (scheduler_core/formers.py) of explicit control (no-man's land or
    # pre-warmed) and of the emergency policy (danger zone), by name.
    explicit_former: str = "length_aware"
    emergency_former: str = "length_aware_emergency"
    # ... and of a sustained overload (Scheduler.overloaded, whatever the zone); its
    # batches also keep within overload_call_budget_sla_fraction of the tightest SLA.
    overload_former: str = "shortest_first"
    # Explicit control starts from this utilisation even while still "safe" (pre-warm).
    prewarm_utilization: float = 0.65
    # Hysteresis: leaving a zone needs the score this far below the entry level, held
    # for min_dwell_ms.
    hysteresis: float = 0.05
    min_dwell_ms: float = 500.0
    # Urgency = urgency_decay_rate ** (slack_ms / urgency_slack_unit_ms) + aging_per_s * wait_s
    urgency_decay_rate: float = 0.85
    urgency_slack_unit_ms: float = 10.0
    aging_per_s: float = 0.5
    urgent_threshold: float = 0.9
    # Places in each explicit-mode batch (beyond its most urgent member) kept for urgent
    # requests whatever their length. Default 0: in the simulator each slot cost goodput on
    # padded devices (a long urgent member pads the whole batch); worth it on ragged ones.
    priority_slots: int = 0
    # Compute-aware splitting: the largest share of padding a batch may carry.
    max_padding_waste: float = 0.15
    # Reserved capacity: in explicit mode a batch may take at most (1 - reserved_capacity)
    # of half the tightest SLA seen, so an urgent arrival is never stuck behind it.
    reserved_capacity: float = 0.20
    # Emergency policy (danger zone).
    emergency_batch_size: int = 4
    emergency_stop_noncritical: bool = False
    noncritical_sla_ms: float = 200.0
    dilution: bool = False  # the design's last resort; off unless asked for
    dilution_gap_ms: float = 1.0
    # Compensation batches after a P99 breach (P99 of latency/SLA above 1).
    max_compensation: float = 2.0
    compensation_cooldown_ms: float = 500.0
    # Shedding when behind (a full batch or more queued): a request that cannot make its
    # deadline even in a batch of min_batch_fill * max_batch_size counts as infeasible -
    # serving it in a tiny batch would cost the throughput everyone else needs.
    min_batch_fill: float = 0.6
    # Requests whose deadline cannot be met even alone and at once: "serve_late" (served
    # after feasible work, counted) or "reject" (UNAVAILABLE at the next scheduling step).
    infeasible_policy: str = "reject"
    # Refuse only what the estimate says misses its deadline by more than this (ms at
    # device speed, scaled like the costs on an emulated device): an estimate is never
    # exact, and a request refused that would have made it is a loss Triton's batcher
    # never has. 0 = refuse on any predicted miss.
    infeasible_margin_ms: float = 0.0
    # A request late from waiting (not late even alone) is refused once the share of the
    # queue that the estimate calls late, smoothed over refusal_window_ms, reaches this;
    # below it the request is served late, as Triton's batcher serves it. 0 (the default):
    # refuse at once - on a compute-bound device a late request's run delays everyone
    # behind it (docs/defaults.md). A launch-bound device (a
    # GPU on a small model: a batch costs about the same full or not) can set 0.2: there a
    # late request rides in a batch that runs anyway, and a short host stall (perf_analyzer
    # on 2 shared cores at 0.8 of native's peak) no longer refuses what native serves.
    refusal_late_share: float = 0.0
    refusal_window_ms: float = 500.0
    # Once the smoothed late share reaches overload_late_share, intake hold commits each
    # execute() call to at most overload_call_budget_sla_fraction of the smallest SLA
    # among its requests and refuses the rest of the call at once: what arrives during a
    # call waits, unseen, in Triton's queue until the call returns, so a long call makes
    # the next one's requests late before the plugin sees them (overload 2x, time scale
    # 10: calls of ~1 s and refusals at 4x their SLA without the budget, 0.82x with it).
    # A call past that budget whose refusals reach overload_exit_late_share of what it
    # decided enters the state at once (Scheduler.call_overran).
    overload_late_share: float = 0.2
    overload_call_budget_sla_fraction: float = 0.25
    # ... and keeps doing so until the smoothed share falls below overload_exit_late_share
    # (hysteresis): a budgeted call refuses its tail, so the next hand-over is young and
    # reads as on time; without it, budgeted and unbudgeted calls alternated under a
    # steady 2x overload, and each unbudgeted call ran long enough to make the next
    # hand-over late before the plugin saw it.
    overload_exit_late_share: float = 0.1


@dataclass(frozen=True)
class CalibrationConfig:
    """Measuring the cost table on the real executor when the model loads
    (``triton_backend.load_calibration``): a grid of batch sizes x lengths timed within a
    wall-clock budget; the measured cells replace ``cost_model`` as the estimator's seed.
    Only real compute is measured (the MiniLM executor): an emulated device already sleeps
    its profile's costs, and a model behind BLS is not run before the server is up."""

    at_load: bool = True
    budget_ms: float = 1000.0  # on a GPU
    # The cap on a CPU: 0 = not measured. A CPU batch of 64 x 512 takes seconds, and a
    # table filled from the few cells a short budget measures does worse than the formula
    # (docs/defaults.md).
    cpu_budget_ms: float = 0.0
    max_sequence_length: int = 512  # the grid's longest length


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    source: str
    description: str
    device_match: tuple[str, ...]
    cost_model: CostModelConfig
    emulation: EmulationConfig
    scheduler: SchedulerConfig
    control: ControlConfig = ControlConfig()
    calibration: CalibrationConfig = CalibrationConfig()
