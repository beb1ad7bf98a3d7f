"""Reliability suite: overload, recovery and soak against a real tritonserver.

Starts its own tritonserver (``server_ops.launcher.TritonServer``, free ports) on a
temporary copy of ``model_repository/`` in which ``emulated_explicit`` and
``emulated_native`` get the model-config parameter ``time_scale`` = 10: the EMULATED device
(a cost model of BERT-base on a T4 that sleeps for each batch's cost) runs 10x slower, so
this 2-core machine can overload it with an open-loop gRPC load generator
(``benchmarks/loadgen.py``). SLA classes are scaled alike: 50/100/200 ms -> 500/1000/2000
ms. Only those two models are loaded (``--model-control-mode=explicit``): the real MiniLM
models would only take CPU and memory from the load generator.

Cases (``--quick``: short versions, for ``make test``; ``--case NAME``, repeatable, runs
only those and keeps the other cases' rows of the last report, marked "previous run"):

overload 2x         (``overload``) Poisson arrivals at 0.5x capacity (warm-up, then the
                    baseline), 2x capacity, then 0.5x again (recovery) against
                    emulated_explicit. Bounds: lost 0; errors only UNAVAILABLE; refusals
                    before the deadline: p99 of (refusal latency / the request's own SLA)
                    <= 1.0; stub and server RSS bounded; the queue-depth gauge never above
                    max_queued_requests; recovery (per-second p99 of ok latencies back within 1.5x
                    of the baseline p99) within 5 s.
timeout 2x          (``timeout``) the overload 2x case with each request's SLA sent as
                    Triton's own per-request ``timeout`` (no SLA input): every answer,
                    served or refused, by its timeout + 50 ms; the overload case's bounds too.
burst 3x            (``burst``) 1.4x capacity (warm-up, then the first phase), 12 s at 3x,
                    then 1.4x again. Bounds: lost 0; from 5 s after the burst, ok P50 and
                    attainment (ok within the request's own SLA, of those sent) within
                    10 % of the first phase's (a model must not stay in a slower state).
soak                (``soak``) 0.7x capacity for 10 min (quick: 15 s). Bounds: every request
                    answered (ok + errors == sent, lost 0); stub RSS growth after warm-up (the
                    first 20 %) <= 5 %; stub thread count not growing.
native overload 2x  (``native``) the same overload against emulated_native (Triton's dynamic
                    batcher, no SLA input), for comparison; only "lost 0" is a bound (quick:
                    skipped). Requests unanswered after a 10 s client timeout end as
                    DEADLINE_EXCEEDED (the client's own deadline, not a server answer).
server stop         one row per server: PASS when tritonserver exits by itself within its
                    exit timeout (exit code 0, no "Exit timeout expired"). Two Triton 2.51
                    behaviours make a server wait its whole exit timeout, for any Python
                    model (reproduced with a ten-line model): a refused reload, and a stub
                    that died with an execute() call in flight, each leave a version that
                    counts as live until exit. The kill and hostile cases therefore run on
                    servers of their own (exit timeout 5 s), whose stop rows say
                    "documented"; the main server's stop must PASS.
stub kill -9        (``kill-hold``) ``crash_hold`` (emulated_explicit as shipped: ``intake: hold``)
  (intake hold)     gets 150 requests of 512 tokens (SLA 600 s) in 0.3 s; 1 s later its stub
                    is killed (SIGKILL, by PID) while a StubSupervisor watches. Bounds: >= 100
                    unanswered at the kill (else the case tested nothing); lost 0: every
                    client answered within 30 s of the kill, none twice; afterwards the model
                    is reloaded and answers an inference. A kill that lands while the stub
                    holds the shared-memory lock aborts tritonserver itself (Triton 2.51, as
                    a stall does): the verdict is then "documented", lost 0 still a bound.
stub kill -9        (``kill-release``) the same against ``crash_release`` (switched to
  (intake release)  ``intake: release``), comparison only: the backend keeps nothing for
                    released requests, so clients give up after a 10 s client timeout
                    (counted, DEADLINE_EXCEEDED); lost 0 is its one bound (quick: skipped).
hostile reloads     (``hostile``) ``hostile_target`` (live) is reloaded with profile_dir
                    symlinked out of the repository, a profile symlinked to /etc/passwd, a
                    100 MB profile, and an inner_model that does not exist. Bounds per
                    reload: refused by the plugin within 2 s (from the server log: Triton's
                    ModelInstanceInitialize to the failure; the whole call, which adds
                    Triton starting the version's stubs, is reported), the refusal names
                    the problem and quotes
                    nothing from outside the repository (the outside folder's path, its
                    secret, /etc/passwd), and the old version still answers.
drip-feeding        (``drip``) ``drip_explicit``'s sidecar scrapes a local endpoint
  metrics endpoint  (``metrics_url``) that serves a real Triton page, then drips one byte
                    every 0.2 s, under 5 req/s. Bound: ``explicit_batching_sidecar_health``
                    on Triton's metrics port (read every 0.1 s) below 1 within 2 s of the
                    sidecar's first scrape that meets the drip (its first dripped byte; it
                    scrapes every 5 s as shipped, so the drip lasts 9 s); lost 0.
stub SIGSTOP 5 s    (``stall``) on a server of its own, 4 req/s for 14 s with a 10 s client
                    timeout; the stub is stopped at 3 s for 5 s (default settings). PASS if
                    the server survives; if it aborts (Triton 2.51 does, see docs/reliability.md "Stub
                    crashes and stalls": no setting prevents it) the verdict is "documented",
                    and the clients' errors count as errors. lost 0 either way; the stubs
                    found at the start are killed by PID if the abort orphaned them, and the
                    server is reaped (quick: skipped).

Time bounds (overload's refusal timing and recovery, the hostile refusals' 2 s, the drip's
2 s) are bounds of the full run, reported with the machine's load average. ``--quick`` runs
inside ``make test`` on a possibly loaded machine: there a missed time bound is reported as
a missed target (WARN, with its measurement), and only the behaviour fails the run: lost 0,
exactly one answer, the refusal naming the problem, nothing quoted, the old version serving.

Every row also says whether the server was healthy afterwards: ready, and the case's model
answers one inference. Processes are only ever signalled by PID, and only those this
script started (the servers' own stubs).

Capacity: ``simulation.simulator.capacity_rps`` of the t4 profile's cost model, padded,
time scale 10, on lengths from the default ``LogNormalLengths``, with the profile's
max_batch_size and max_batch_tokens.

Prints a markdown table (case | requests sent | answered | errors by code | lost | healthy
afterwards | notes | verdict); the full run also writes it to results/reliability.md.
Exits 1 if any case loses a request or fails a bound.
"""

from .run import main

__all__ = ["main"]
