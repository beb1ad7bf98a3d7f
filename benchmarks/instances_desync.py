"""Two instances of one explicit model, live: synchronised controllers (no period jitter,
no window smoothing) beside desynchronised ones (period_jitter 0.5,
window_time_constant_ms 3000), one server, the same bursty arrivals for each. Every
instance's zone and window are scraped (label model_instance) for the variance of the
aggregate window, a coupling index and zone flips; the load generator gives goodput.

    .venv/bin/python scripts/instances_desync.py [--out results/instances_desync.md]

EMULATED t4 device at time scale 10 (each instance's stub emulates its own device), SLA
classes scaled alike; one 2-core machine shared by the server, its stubs and the load
generator. The two models take turns, six runs each in the order A B B A repeated, so a
drift of the machine over the run falls on both alike, after one burn-in run of each that
is not counted (the first runs on a fresh server came out faster than the later ones).
Goodput is compared pair by pair (runs 1-2, 3-4, ...): the machine's drift from one run to
the next is smaller than over the whole hour.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from benchmarks import benchmark as B
from benchmarks.loadgen import run_load
from benchmarks.pages import write_page
from benchmarks.oscillation import SAMPLE_S, ZoneSampler
from benchmarks.repository import copy_model
from scheduler_core import workload as W
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.simulator import capacity_rps
from triton_backend.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "instances_desync.md")
TIME_SCALE = 10.0
SLA_CLASSES_MS = tuple(s * TIME_SCALE for s in (50.0, 100.0, 200.0))
LENGTHS = W.LogNormalLengths(median=64.0, sigma=0.8, lo=16, hi=512)
# The first WARMUP_S of each run are neither counted nor sampled: the cold start (an idle
# device's wide window coming down to the loaded one) is a transient, not oscillation, and
# a 3 s time constant needs about 3 of them to settle.
WARMUP_S, MEASURE_S, SEED = 10.0, 40.0, 5
VARIANTS = (("pair_sync", "0", "0"), ("pair_desync", "0.5", "3000"))
ORDER = (0, 1, 1, 0) * 3  # A B B A, three times: six adjacent pairs
GOODPUT_TOLERANCE = 0.01  # "no worse": the mean paired goodput change at least -1 %


def _two_instances(model) -> None:
    model.instance_group[0].count = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    profile = load_profile(profile_path(os.path.join(DEFAULT_MODEL_REPOSITORY,
                                                     "emulated_explicit", "profiles"), "t4"))
    cap = capacity_rps(profile.cost_model, "padded", TIME_SCALE,
                       W.sample_lengths(20_000, 1, LENGTHS), profile.scheduler.max_batch_size,
                       profile.scheduler.max_batch_tokens)
    # Two instances, two emulated devices: bursts to 1.2x of both, lulls at 0.3x.
    process = W.Bursty(0.3 * 2 * cap, 1.2 * 2 * cap, 2.0, 0.5)
    arrivals = W.generate(process, WARMUP_S + MEASURE_S, SEED, LENGTHS, W.SlaMix(SLA_CLASSES_MS))
    runs = []  # (variant index, stats, oscillation), in the order run
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(repo)
        for name, jitter, tau in VARIANTS:
            copy_model("emulated_explicit", repo, name, edit=_two_instances,
                       params={"time_scale": f"{TIME_SCALE:g}", "hardware_profile": "t4",
                               "profile_dir": f"{name}/profiles",
                               "control.period_jitter": jitter,
                               "control.window_time_constant_ms": tau})
        with TritonServer(repo, log_path=os.path.join(tmp, "server.log"),
                          exit_timeout_s=10) as server:
            for name, _, _ in VARIANTS:  # burn-in
                run_load(server.grpc_url, name, arrivals[:len(arrivals) // 3], clients=4,
                         drain_timeout_s=60.0)
            for v in ORDER:
                name = VARIANTS[v][0]
                sources = [(server.metrics_url, {"model": name, "model_instance": f"{name}_0_{i}"})
                           for i in range(2)]
                with ZoneSampler(sources) as sampler:
                    result = run_load(server.grpc_url, name, arrivals, clients=4,
                                      drain_timeout_s=60.0)
                stats = B.measured_stats("explicit", result.window(WARMUP_S, WARMUP_S + MEASURE_S))
                osc = sampler.oscillation(WARMUP_S, WARMUP_S + MEASURE_S)
                runs.append((v, stats, osc))
                print(f"{name}: goodput {stats.goodput_rps:.1f}, aggregate window variance "
                      f"{osc['aggregate_variance']:.4f}, coupling {osc['coupling']:.2f}", flush=True)
    lines = ["# Two instances of one model, live: synchronised vs desynchronised controllers", "",
             "Generated by `.venv/bin/python scripts/instances_desync.py`. " +
             " ".join(__doc__.split("\n\n")[2].split()), "",
             f"Bursty arrivals (0.3x / 1.2x of the two devices' {2 * cap:,.1f} req/s, 2 s / "
             f"0.5 s); per run {MEASURE_S:g} s measured after {WARMUP_S:g} s, goodput and the "
             f"gauges alike; gauges scraped every {SAMPLE_S:g} s or as fast as the loaded "
             "machine allows (the rounds are chosen by time). Target: aggregate window "
             "variance <= 1/3 of the synchronised controllers' with goodput no worse (the "
             f"mean paired change at least -{GOODPUT_TOLERANCE:.0%}).", "",
             "| run | model | period_jitter | window_time_constant_ms | goodput (req/s) | "
             "in SLA | refused | aggregate window variance (ms^2) | coupling (1 independent, "
             "2 lockstep) | zone flips per minute | send lag p99 (ms) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k, (v, s, osc) in enumerate(runs, 1):
        name, jitter, tau = VARIANTS[v]
        lines.append(f"| {k} | {name} | {jitter} | {tau} | {s.goodput_rps:,.1f} | "
                     f"{s.attainment:.1%} | {sum(s.errors.values())} | "
                     f"{osc['aggregate_variance']:.4f} | {osc['coupling']:.2f} | "
                     f"{osc['flips_per_minute']:.1f} | {s.send_lag_p99_ms:.1f} |")
    mean = {v: {key: statistics.mean(f(s, o) for w, s, o in runs if w == v)
                for key, f in (("variance", lambda s, o: o["aggregate_variance"]),
                               ("goodput", lambda s, o: s.goodput_rps),
                               ("flips", lambda s, o: o["flips_per_minute"]))}
            for v in range(len(VARIANTS))}
    ratio = mean[1]["variance"] / mean[0]["variance"]
    # Goodput, pair by pair: the desynchronised run over the synchronised one beside it.
    changes = []
    for (va, sa, _), (vb, sb, _) in zip(runs[0::2], runs[1::2]):
        sync, desync = (sa, sb) if va == 0 else (sb, sa)
        changes.append(desync.goodput_rps / sync.goodput_rps - 1.0)
    change = statistics.mean(changes)
    error = statistics.stdev(changes) / len(changes) ** 0.5
    met = ratio <= 1.0 / 3.0 and change >= -GOODPUT_TOLERANCE
    spread = [o["aggregate_variance"] for w, s, o in runs if w == 0]
    lines += ["", f"Mean over the {ORDER.count(1)} runs of each: aggregate window variance "
              f"{mean[1]['variance']:.4f} (desynchronised) vs {mean[0]['variance']:.4f} "
              f"(synchronised), **{ratio:.2f}x**; goodput {mean[1]['goodput']:,.1f} vs "
              f"{mean[0]['goodput']:,.1f} req/s; zone flips per minute "
              f"{mean[1]['flips']:.1f} vs {mean[0]['flips']:.1f}. The synchronised runs "
              f"alone ranged {min(spread):.4f}-{max(spread):.4f} ms^2 (the run-to-run noise "
              "on this machine).", "",
              "Goodput of each desynchronised run against the synchronised run beside it: "
              + ", ".join(f"{c:+.1%}" for c in changes)
              + f"; mean **{change:+.1%}**, standard error {error:.1%}. Target (variance "
              f"<= 1/3, goodput change >= -{GOODPUT_TOLERANCE:.0%}): **"
              f"{'met' if met else 'missed'}**."]
    write_page(args.out, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
