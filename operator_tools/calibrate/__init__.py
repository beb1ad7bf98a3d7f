"""``calibrate``: the design's tuning road map (docs/design.md, section 5.2) against a live server.

Cold start (default)
    Explicit control off (the model is reloaded with ``control.enabled=false`` through
    Triton's model-load API), a perf_analyzer request-rate sweep, the load-latency curve,
    and this deployment's zone boundaries: where the P99 coefficient of variation crosses
    0.1 and 0.3 and where the queue depth crosses 5 and 15 (the design's table). The
    thresholds measured there go into a hardware profile (a copy of the model's current
    one, only the six zone thresholds changed), and a control-effect baseline for
    ``monitor --check-metric-drift`` is recorded with control back as it was.
``--reset-parameters baseline --profile PATH``
    The design's conservative start, scheduler.alpha=0.2 and beta=0.1, written in place.
``--step``
    Walk alpha, then beta, in steps (one reload with ``scheduler.alpha``/``scheduler.beta``
    parameters and one perf_analyzer run per change) and report goodput and P99 per setting.
    Each reload also sets ``control.infeasible_policy=serve_late`` (benchmark mode,
    ``operator_tools.benchmark_mode``; ``--infeasible-policy as-configured`` leaves it):
    perf_analyzer stops at the first refused request, so a step rate past the knee would
    otherwise measure nothing. The cold-start sweep needs no such change: with
    ``control.enabled=false`` the plugin refuses no request for its deadline.
``table``
    A measured cost table into a profile: from a file, the MiniLM executor on this host, or
    the user's own inner model through its Triton endpoint (``--url --model``,
    ``remote_table``).
"""

from .cli import command

__all__ = ["command"]
