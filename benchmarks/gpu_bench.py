"""A real model on a real device: the measured cost table, and explicit control vs Triton's
own dynamic batcher, in one bounded run.

On a GPU host, from the project root, given a tritonserver 2.51 and a Python with the
``cli`` and ``minilm`` extras (numpy<2). In the NGC container (``tritonserver`` on PATH)::

    python3 scripts/gpu_bench.py [--model minilm|bert_large] [--time-limit-s 480] [--out DIR]

``--model`` picks the model (``benchmarks.gpu_plan.FAMILIES``): ``minilm`` (default), the
real MiniLM, launch-bound on a big GPU; ``bert_large``, the BERT-large architecture with
random weights in fp16 (executor ``bert_large_random``; nothing downloaded), device-bound:
its outputs are meaningless and its costs real. Below, ``<model>`` is that key.

Elsewhere name the server with EXPLICIT_BATCHING_TRITONSERVER (and, if its backends are not
beside its ``bin/``, EXPLICIT_BATCHING_BACKEND_DIR); with the ``nvidia-pytriton`` wheel
installed (``make setup``) nothing needs naming. An offline host may instead run a packed
copy of this project's environment, as its own tooling provides.

Here, on a CPU, to check the whole path end to end before a GPU session spends its minutes::

    .venv/bin/python scripts/gpu_bench.py --cpu-smoke        # a few minutes; writes to /tmp

What it does, in order, within ``--time-limit-s`` (the segment length is computed from what
is left once the server is up and the peaks are measured):

1. **Cost table.** The model's encoder (``triton_backend.executors``) timed on a grid of
   batch sizes x lengths with ``triton_backend.device_calibration.measure_cost_table``, on
   ``cuda:0`` when torch sees CUDA, else on the CPU. Written to ``cost_table.json`` in the
   row form of ``results/gpu/h200_minilm_costs.json``, with the device name (torch and
   NVML), the date and the torch version.
2. **One tritonserver** on a temporary copy of the model repository: ``<model>_explicit``
   (the shipped ``minilm_explicit``, its executor and output width set for the model),
   ``<model>_explicit_peak`` (the same with ``control.infeasible_policy=serve_late``, for
   the closed-loop peak only: perf_analyzer stops at the first refusal), and
   ``<model>_native_d<delay>`` for each native ``max_queue_delay`` (default 0 / 1000 /
   5000 us), ``max_batch_size`` 64. The models are ``KIND_CPU`` instances, which
   stay on the CPU; on a CUDA host every copy gets the model-config parameter
   ``device: cuda:0`` (``triton_backend.placement``), so each moves itself to GPU 0, and
   NVML then names the explicit model's profile.
3. **Closed-loop peaks** (perf_analyzer, gRPC, concurrency 64, the same length mix) of
   the explicit model and of each native setting; native's peak is the best of them.
   **Open loop** at 0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.5, 2.0 x native's peak: Poisson
   arrivals, a long-tailed length mix, SLA classes 50 / 100 / 200 ms, sent by
   ``benchmarks/loadgen.py`` through ``scripts/bench.py``'s ``Bench.segment``;
   explicit and every native setting on the very same arrivals, order flipped per load;
   the best native (goodput) per load.
4. ``report.md`` and ``results.json`` in ``--out``, naming the device that produced them.

``--cpu-smoke`` runs the same path on the CPU with a tiny grid, a short length mix, SLA
classes x5, concurrency 8, three loads, short segments and (bert_large) one encoder layer.
Its figures are NOT a device result, and its output goes to a temporary folder unless
``--out`` says otherwise (never commit it).

``scripts/gpu_session.sh`` runs both models in one bounded command (a GPU session's check).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

from benchmarks import bench_setup as BENCH
from benchmarks.bench_server import Bench
from benchmarks.gpu_host import (closed_loop_peak, device_info, device_label, measure_costs,
                                 sanity_check, server_placement_lines, wait_all_idle)
from benchmarks.gpu_plan import (Clock, DEFAULT_OUT, EXPLICIT_SRC, FAMILIES, GPU,
                                 NATIVE_DELAYS_US, NATIVE_MAX_BATCH, NATIVE_SRC, SEED, SHIPPED,
                                 SMOKE, ModelFamily, Settings, log, plan_segment_s,
                                 segment_cost_factor)
from benchmarks.gpu_report import row_line, write_outputs
from benchmarks.repository import copy_model
from simulation import workload as W


def build_repository(repo: str, delays_us, device_param: str | None,
                     explicit_params: dict[str, str],
                     family: ModelFamily = FAMILIES["minilm"], bert_layers: int = 24,
                     shape_bucket_tokens: int = 0) -> list[str]:
    """The bench's model repository in ``repo``; returns the model names."""
    os.makedirs(repo, exist_ok=True)
    common = {**family.params(bert_layers, shape_bucket_tokens),
              **({"device": device_param} if device_param else {})}

    def width(model):
        model.output[0].dims[:] = [family.output_dim]

    models = []
    for name, extra in ((family.explicit, {}),
                        (family.explicit_peak, {"control.infeasible_policy": "serve_late"})):
        copy_model(EXPLICIT_SRC, repo, name, source=SHIPPED,
                   params={**common, **explicit_params, **extra}, edit=width)
        models.append(name)
    for delay in delays_us:
        def native(model, delay=delay):
            width(model)
            model.max_batch_size = NATIVE_MAX_BATCH
            model.dynamic_batching.max_queue_delay_microseconds = int(delay)
        copy_model(NATIVE_SRC, repo, family.native(delay), source=SHIPPED, params=common,
                   edit=native)
        models.append(family.native(delay))
    return models


def run_bench(args, settings: Settings, clock: Clock, info: dict, out_dir: str,
              results: dict) -> None:
    from server_ops.launcher import TritonServer

    family = FAMILIES[args.model]
    delays = tuple(args.native_delays_us)
    device_param = "cuda:0" if info["torch_device"].startswith("cuda") else None
    explicit_params = dict(kv.split("=", 1) for kv in args.explicit_param)
    work = tempfile.mkdtemp(prefix="gpu_bench_")
    repo = os.path.join(work, "repo")
    models = build_repository(repo, delays, device_param, explicit_params, family,
                              settings.bert_layers, args.shape_bucket_tokens)
    natives = [family.native(d) for d in delays]
    results["server"] = {"models": models, "device_parameter": device_param,
                         "explicit_params": explicit_params,
                         "native": {"max_batch_size": NATIVE_MAX_BATCH, "delays_us": delays}}
    slas = settings.sla_classes_ms
    timeout_s = BENCH.CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0

    # closed-loop input data: the open loop's length mix and SLA classes
    mix = W.generate(W.Poisson(100.0), 5.0, SEED + 1, settings.lengths, W.SlaMix(slas))
    with_sla, no_sla = os.path.join(work, "mix_sla.json"), os.path.join(work, "mix.json")
    W.write_input_data(mix, with_sla, SEED, include_sla=True)
    W.write_input_data(mix, no_sla, SEED, include_sla=False)

    log_path = os.path.join(out_dir, "tritonserver.log")
    server = TritonServer(repo, log_path=log_path, exit_timeout_s=15,
                          extra_args=("--model-control-mode=explicit",
                                      *(f"--load-model={m}" for m in models)))
    log(f"starting tritonserver with {', '.join(models)}"
        + (f" (parameter device={device_param})" if device_param else ""))
    server.start()
    try:
        server.wait_ready(min(settings.server_start_timeout_s, max(30.0, clock.left() - 30)))
        results["timeline"]["server_ready_s"] = clock.elapsed()
        log(f"server ready after {clock.elapsed():.0f} s of the run (gRPC {server.grpc_url})")
        results["sanity"] = sanity_check(server, models, family.output_dim)
        results["placement_log"] = server_placement_lines(log_path)
        for line in results["placement_log"]:
            log(f"  server log: {line}")
        bench = Bench(server, models)

        # closed-loop peaks
        peaks = {}
        for model, data in ((family.explicit_peak, with_sla),
                            *((n, no_sla) for n in natives)):
            if clock.left() < 60:
                log("time limit: skipping the remaining closed-loop peaks")
                break
            try:
                peaks[model] = closed_loop_peak(server, model, data, settings)
                log(f"closed loop {model}: {peaks[model]['throughput_rps']:.1f} req/s "
                    f"(P50 {peaks[model]['p50_ms']:.1f} ms)")
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                peaks[model] = {"model": model, "error": str(exc)[-2000:]}
                log(f"closed loop {model} FAILED: {str(exc)[-300:]}")
        results["closed_loop"] = peaks
        results["timeline"]["peaks_done_s"] = clock.elapsed()
        bench.unload(family.explicit_peak)  # its stub would only take CPU from here on
        native_peaks = [p["throughput_rps"] for m, p in peaks.items()
                        if m in natives and p.get("throughput_rps")]
        if args.native_peak_rps:
            peak = float(args.native_peak_rps)
            results["native_peak_source"] = "--native-peak-rps"
        elif native_peaks:
            peak = max(native_peaks)
            results["native_peak_source"] = "closed loop, best native setting"
        else:
            raise RuntimeError("no native closed-loop peak measured (see closed_loop errors); "
                               "pass --native-peak-rps to run the open loop anyway")
        results["native_peak_rps"] = peak

        # open loop
        reserve = 25.0  # server shutdown and the report
        seg_s = plan_segment_s(clock.left() - reserve, settings.loads, len(natives),
                               settings.warmup_s, settings.segment_overhead_s,
                               settings.min_segment_s, settings.max_segment_s)
        results["open_loop_plan"] = {"segment_s": seg_s, "warmup_s": settings.warmup_s,
                                     "time_left_s": clock.left(), "loads": settings.loads,
                                     "client_timeout_s": timeout_s}
        log(f"open loop: native peak {peak:.1f} req/s; segments of {seg_s:.1f} s "
            f"(+{settings.warmup_s:g} s warm-up), {clock.left():.0f} s left")
        rows = results["open_loop"]
        for i, load in enumerate(settings.loads):
            rate = load * peak
            arrivals = BENCH.arrivals_for("poisson", rate, settings.warmup_s + seg_s,
                                          SEED + int(round(load * 100)), slas, settings.lengths)
            roles = ([("explicit", family.explicit)]
                     + [(f"native_d{d}", family.native(d)) for d in delays])
            if i % 2:
                roles.reverse()
            row = {"load": load, "rate_rps": rate, "cells": {}, "skipped": [],
                   "idle_wait_s": {}}
            for role, model in roles:
                need = ((settings.warmup_s + seg_s)
                        * segment_cost_factor(load, role != "explicit")
                        + settings.segment_overhead_s + reserve)
                if clock.left() < need:
                    row["skipped"].append(role)
                    continue
                waited = wait_all_idle(server, min(settings.idle_timeout_s,
                                                   max(1.0, clock.left() - need)))
                row["idle_wait_s"][role] = round(waited, 2)
                stats = bench.segment("explicit" if role == "explicit" else "native", model,
                                      arrivals, seg_s, role == "explicit", timeout_s,
                                      settings.warmup_s)
                row["cells"][role] = stats
            rows.append(row)
            log(row_line(row))
            if row["skipped"]:
                results["cut_short"] = True
        results["lost"] = bench.lost
        results["timeline"]["open_loop_done_s"] = clock.elapsed()
    finally:
        log("stopping tritonserver")
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


class TimeLimit(Exception):
    pass


def _alarm(signum, frame):
    raise TimeLimit("hard time limit reached")


def _terminate(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(FAMILIES), default="minilm",
                        help="the model to run (default minilm; bert_large: random weights, "
                             "fp16, device-bound)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny loads and short segments on the CPU (not a device result)")
    parser.add_argument("--time-limit-s", type=float, default=None,
                        help="hard limit on the whole run (default 480; 300 with --cpu-smoke)")
    parser.add_argument("--out", default=None,
                        help="output folder (default results/gpu; with --cpu-smoke a new "
                             "temporary folder)")
    parser.add_argument("--calibration-budget-s", type=float, default=None)
    parser.add_argument("--native-delays-us", type=int, nargs="+", default=list(NATIVE_DELAYS_US))
    parser.add_argument("--loads", type=float, nargs="+", default=None,
                        help="open-loop loads as fractions of native's closed-loop peak")
    parser.add_argument("--native-peak-rps", type=float, default=None,
                        help="base the open-loop loads on this rate instead of the measured "
                             "native peak (the peaks are still measured and reported)")
    parser.add_argument("--explicit-param", action="append", default=[], metavar="KEY=VALUE",
                        help="extra model-config parameter for the explicit models (repeatable)")
    parser.add_argument("--skip-calibration", action="store_true")
    parser.add_argument("--shape-bucket-tokens", type=int, default=0,
                        help="every model's shape_bucket_tokens (0: pad to the batch's "
                             "longest; N: lengths to a multiple of N, rows to a power of two, "
                             "warmed at load)")
    args = parser.parse_args(argv)
    for kv in args.explicit_param:
        if "=" not in kv:
            parser.error(f"--explicit-param wants KEY=VALUE, got {kv!r}")
    settings = SMOKE if args.cpu_smoke else GPU
    if args.calibration_budget_s is not None:
        settings = _replace(settings, calibration_budget_s=args.calibration_budget_s)
    if args.loads:
        settings = _replace(settings, loads=tuple(args.loads))
    limit = args.time_limit_s or (300.0 if args.cpu_smoke else 480.0)
    clock = Clock(limit)
    out_dir = args.out or (tempfile.mkdtemp(prefix="gpu_bench_smoke_") if args.cpu_smoke
                           else DEFAULT_OUT)
    os.makedirs(out_dir, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(limit + 45))  # last resort: segments are planned to end well before

    info = device_info(args.cpu_smoke)
    results: dict = {
        "command": "python3 scripts/gpu_bench.py " + " ".join(argv if argv is not None
                                                              else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "smoke": settings.smoke,
        "time_limit_s": limit, "device": info, "device_label": device_label(info),
        "shape_bucket_tokens": args.shape_bucket_tokens, "model": args.model,
        "model_title": FAMILIES[args.model].title, "model_outputs": FAMILIES[args.model].outputs,
        "source": ("CPU smoke run, not a device result" if settings.smoke else
                   f"real device: {device_label(info)}"),
        "settings": {"grid": settings.grid, "lengths": vars(settings.lengths),
                     "sla_classes_ms": settings.sla_classes_ms,
                     "concurrency": settings.concurrency, "loads": settings.loads,
                     "bert_layers": settings.bert_layers},
        "timeline": {}, "open_loop": [], "cut_short": False}
    log(f"device: {device_label(info)}; {'CPU SMOKE RUN' if settings.smoke else 'device run'}; "
        f"limit {limit:.0f} s; output {out_dir}")
    if not settings.smoke and not info["cuda_available"]:
        log("WARNING: torch sees no CUDA: this is a CPU run with GPU-sized loads "
            "(use --cpu-smoke on a CPU)")
    rc = 0
    try:
        if not args.skip_calibration:
            results["cost_table"] = measure_costs(settings, info, out_dir,
                                                  FAMILIES[args.model],
                                                  args.shape_bucket_tokens)
            results["timeline"]["cost_table_done_s"] = clock.elapsed()
        run_bench(args, settings, clock, info, out_dir, results)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - the report says what failed
        results["error"] = f"{type(exc).__name__}: {exc}"
        log(f"FAILED: {results['error']}")
        rc = 1
    finally:
        signal.alarm(0)
        results["wall_s"] = clock.elapsed()
        write_outputs(results, out_dir)
        log(f"wrote {out_dir}/report.md, results.json, cost_table.json in "
            f"{results['wall_s']:.0f} s")
    return rc if not results.get("lost") else 1


def _replace(settings: Settings, **changes) -> Settings:
    import dataclasses
    return dataclasses.replace(settings, **changes)
