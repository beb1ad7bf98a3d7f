"""``explicit-batching compare``: the design's A/B on a live server, in ONE run.

The same open-loop load goes to ``<x>_explicit`` and ``<x>_native`` (``--model x``; the
demo pair is ``--model emulated``) on one running tritonserver, in alternating
segments: explicit, native, explicit, native, ... Every segment replays the very same
trace (same seed: same arrival times, same sequences, same SLAs), so the two models see
identical load, and alternating spreads whatever else the machine is doing over both.

How one segment runs
    perf_analyzer 2.51 replays the trace with ``--request-intervals`` (integer
    microseconds between sends, from ``simulation.workload``: Poisson or bursty
    on-off arrivals) and ``--input-data`` (one entry per request: send k carries entry k),
    ``--async`` (open loop: a slow server never slows the sender) and ``--request-count``
    = the trace's length (exactly one pass, no warm-up), with one worker thread
    (``--max-threads 1``: ``perf_analyzer.replay_trace`` says why). The explicit model gets each
    request's SLA as the ``SLA_MS`` input; the native model gets the same sequences
    without it (perf_analyzer refuses inputs a model does not declare). A request's SLA
    class is known from its input-data entry, whichever model served it.

Why perf_analyzer's profile export (``--profile-export-file``) for per-request data
    SLA attainment is a per-request question: did THIS request, with ITS SLA, finish in
    time? perf_analyzer's CSV and summary only give aggregate percentiles over all
    requests; the profile export gives every request's send timestamp, response
    timestamp and the very inputs it carried (so its SLA and length), measured by
    Triton's own load generator in the process that sent it. From it come latency per
    SLA class, goodput, and the load generator's send lag (actual send time minus the
    trace's scheduled time: a lagging sender would quietly offer a lower load, so it is
    reported, not assumed). Server-side request statistics cannot do this: they see
    neither the client's clock nor, for the explicit model, the request's completion
    (it answers from its own thread after ``execute()`` returned).

    The cost: perf_analyzer stops a run at the first failed request and then writes no
    export. An explicit model that sheds infeasible requests (``UNAVAILABLE``, its default
    ``control.infeasible_policy: reject``) under overload would end its segment there. So
    compare runs the explicit model in benchmark mode (``operator_tools.benchmark_mode``):
    reloaded with ``control.infeasible_policy=serve_late`` for the run and its original
    config loaded back after; such requests are served late and count as missed SLAs, and
    the report says so. ``--infeasible-policy as-configured`` keeps the model as it is; a
    server that cannot reload models (not ``--model-control-mode=explicit``) measures it as
    configured, and a segment that still fails is reported and makes compare exit 1.

Utilisation fluctuation from the server's metrics
    A scraper thread reads Triton's metrics port every second (``--scrape-period-s``).
    ``nv_inference_compute_infer_duration_us`` is NOT the device's busy time for either
    model here, which the report shows side by side:

    * the explicit model owns its queue: ``execute()`` only hands requests to the
      model's scheduler thread and returns, so Triton's compute counters measure those
      hand-overs (well under a millisecond each), not the batches. Its busy fraction is
      the model's own gauge ``explicit_batching_utilization_ratio`` (the executor's
      measured busy share over its 1 s perception window; NVML utilisation instead where
      the sidecar reads a GPU) - available for the explicit model only.
    * for the native model Triton adds a batch's compute time once per REQUEST in it
      (a batch of 8 adds it 8 times), so the counter overstates the busy time by the
      batch size. Its busy fraction comes from Triton's per-batch statistics (the
      statistics extension's ``batch_stats``, ``GET /v2/models/<m>/stats``, polled with
      the metrics), whose compute time is counted once per execution.

    Utilisation fluctuation is the standard deviation of the per-second busy fraction
    over the seconds that lie inside the model's own segments.

The report says whether the device is EMULATED and its time scale, read from each model's
config through the HTTP model-config API (``GET /v2/models/<m>/config``: parameters
``executor``, ``hardware_profile``, ``time_scale``). SLA classes are given at real-hardware
speed and multiplied by that time scale, like the device's cost.
"""

from .cli import command

__all__ = ["command"]
