"""Several tritonservers behind HAProxy on ONE machine, standing in for replicas behind a
Kubernetes Service (docs/scale-out.md): the shipped ``emulated_explicit`` (EMULATED t4,
slowed by a time scale so that 2 shared cores can drive three servers; SLA classes
scaled alike) in each server, HAProxy balancing gRPC requests round-robin, one open-loop
load generator. The same Poisson arrivals go to 1, 2 and 3 servers. Then, on the 3
servers, the shipped default and a variant with smoothed controllers
(``control.window_time_constant_ms`` 3000, as docs/scale-out.md advises for replicas)
take turns, A B B A; during those runs every server's zone and elastic window are
scraped, for cross-server oscillation.

    .venv/bin/python scripts/multi_server.py [--out results/multi_server.md]

Needs ``haproxy`` on PATH (Debian: ``apt-get install haproxy``). Everything runs on this
one machine: the servers, HAProxy and the load generator share its cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

from benchmarks import segment_stats as B
from benchmarks.bench_setup import (LENGTHS, SLA_CLASSES_MS as BENCH_SLA_CLASSES_MS,
                                    emulated_capacity_rps)
from benchmarks.loadgen import run_load
from benchmarks.oscillation import SAMPLE_S, ZoneSampler
from benchmarks.pages import write_page
from benchmarks.repository import copy_model
from simulation import workload as W
from server_ops.launcher import TritonServer
from server_ops.ports import free_ports

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "multi_server.md")
MODEL = "emulated_explicit"
SMOOTHED = "emulated_explicit_smoothed"  # the variant, beside the shipped default
SMOOTHED_PARAMS = {"control.window_time_constant_ms": "3000"}
SERVERS = 3
TIME_SCALE = 20.0
LOAD = 0.6  # of the three servers' capacity together
SLA_CLASSES_MS = tuple(s * TIME_SCALE for s in BENCH_SLA_CLASSES_MS)  # the bench's mix
WARMUP_S, MEASURE_S, SEED = 10.0, 20.0, 11  # the first 10 s: the cold start, not counted
HAPROXY_CONFIG = """global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
frontend grpc_in
  bind 127.0.0.1:{port} proto h2
  default_backend tritons
backend tritons
  balance roundrobin
{servers}
"""


def capacity_per_server() -> float:
    return emulated_capacity_rps("t4", W.sample_lengths(20_000, 1, LENGTHS), TIME_SCALE)


def _haproxy(tmp: str, servers: list[TritonServer]) -> tuple[subprocess.Popen, str]:
    (port,) = free_ports(1)
    lines = "\n".join(f"  server s{i} {srv.grpc_url} proto h2" for i, srv in enumerate(servers))
    path = os.path.join(tmp, f"haproxy{len(servers)}.cfg")
    with open(path, "w") as fh:
        fh.write(HAPROXY_CONFIG.format(port=port, servers=lines))
    proc = subprocess.Popen(["haproxy", "-f", path, "-db"], stdout=subprocess.DEVNULL,
                            stderr=open(path + ".log", "w"))
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"localhost:{port}"
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"haproxy did not listen on {port} within 30 s; see {path}.log")


def fresh(server: TritonServer, model: str) -> None:
    """``model`` freshly loaded (a new queue, controller and cost refit) and the other of
    the two unloaded, so no idle stubs of it run beside."""
    for other in {MODEL, SMOOTHED} - {model}:
        server.unload_model(other)
    server.reload_model(model)


def _run(servers: list[TritonServer], tmp: str, model: str, arrivals) -> tuple:
    """One run of ``arrivals`` through HAProxy over ``servers``, freshly loaded with
    ``model``: (result, measured stats, oscillation of the measured part)."""
    for srv in servers:
        fresh(srv, model)
    proxy, url = _haproxy(tmp, servers)
    try:
        with ZoneSampler([(srv.metrics_url, {"model": model}) for srv in servers]) as sampler:
            result = run_load(url, model, arrivals, clients=4, drain_timeout_s=60.0)
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=10)
    stats = B.measured_stats("explicit", result.window(WARMUP_S, WARMUP_S + MEASURE_S))
    print(f"{len(servers)} server(s), {model}: goodput {stats.goodput_rps:.1f} req/s, "
          f"{stats.attainment:.1%} in SLA, lost {result.lost}", flush=True)
    return result, stats, sampler.oscillation(WARMUP_S, WARMUP_S + MEASURE_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if shutil.which("haproxy") is None:
        raise SystemExit("haproxy is not on PATH (Debian: apt-get install haproxy)")
    cap = capacity_per_server()
    offered = LOAD * SERVERS * cap
    arrivals = W.generate(W.Poisson(offered), WARMUP_S + MEASURE_S, SEED, LENGTHS,
                          W.SlaMix(SLA_CLASSES_MS))
    rows, turns = [], []
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(repo)
        params = {"time_scale": f"{TIME_SCALE:g}", "hardware_profile": "t4"}
        copy_model(MODEL, repo, params=params)
        copy_model(MODEL, repo, SMOOTHED,
                   params={**params, "profile_dir": f"{SMOOTHED}/profiles", **SMOOTHED_PARAMS})
        servers = [TritonServer(repo, log_path=os.path.join(tmp, f"server{i}.log"),
                                exit_timeout_s=10,
                                extra_args=("--model-control-mode=explicit",
                                            f"--load-model={MODEL}")) for i in range(SERVERS)]
        try:
            for srv in servers:
                srv.start()
            for srv in servers:
                srv.wait_ready()
            for k in range(1, SERVERS + 1):
                result, stats, _ = _run(servers[:k], tmp, MODEL, arrivals)
                rows.append((k, result, stats))
            for model in (MODEL, SMOOTHED, SMOOTHED, MODEL):
                turns.append((model, *_run(servers, tmp, model, arrivals)))
        finally:
            for srv in servers:
                srv.stop()
    write_report(args.out, cap, offered, rows, turns)
    return 0


def write_report(path: str, cap: float, offered: float, rows, turns) -> None:
    lines = [f"# {SERVERS} tritonservers behind HAProxy, on ONE machine", "",
             "Generated by `.venv/bin/python scripts/multi_server.py` on this 2-core machine: "
             "the servers, HAProxy (round-robin over gRPC, HTTP/2) and the load generator share "
             "its cores, so this stands in for replicas behind a Service, not for a cluster. "
             f"Each server runs the shipped `{MODEL}` (intake hold) on the EMULATED t4 device "
             f"at time scale {TIME_SCALE:g} (SLA classes "
             f"{'/'.join(f'{s:g}' for s in SLA_CLASSES_MS)} ms, scaled alike). One server's "
             f"capacity for the length mix: {cap:,.1f} req/s. The same Poisson arrivals, "
             f"{offered:,.1f} req/s ({LOAD:g} of {SERVERS} servers' capacity), go to 1, 2 and "
             f"{SERVERS} servers, each run on freshly loaded models (a new controller, queue and "
             f"cost refit); the first {WARMUP_S:g} s are not measured.", "",
             "| servers | goodput (req/s) | in SLA | P50 (ms) | P99 (ms) | refused | lost | "
             "send lag p99 (ms) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k, result, s in rows:
        lines.append(f"| {k} | {s.goodput_rps:,.1f} | {s.attainment:.1%} | {s.p50_ms:,.1f} | "
                     f"{s.p99_ms:,.1f} | {sum(s.errors.values())} | {result.lost} | "
                     f"{s.send_lag_p99_ms:.1f} |")
    lines += ["", f"Then the {SERVERS} servers again, the shipped default (`{MODEL}`) and the "
              f"smoothed variant (`{SMOOTHED}`: "
              + ", ".join(f"`{k}` {v}" for k, v in SMOOTHED_PARAMS.items())
              + ") in turns, each run on freshly loaded models; the zone and window gauges of "
              f"every server scraped every {SAMPLE_S:g} s over the measured part (coupling "
              f"index: 1 independent windows, {SERVERS} lockstep).", "",
              "| run | model | goodput (req/s) | in SLA | P99 (ms) | aggregate window variance "
              "(ms^2) | coupling | zone flips per minute | zone flips in step | outside the "
              "safe zone | send lag p99 (ms) |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k, (model, result, s, osc) in enumerate(turns, 1):
        lines.append(f"| {k} | {model} | {s.goodput_rps:,.1f} | {s.attainment:.1%} | "
                     f"{s.p99_ms:,.1f} | {osc['aggregate_variance']:.4f} | "
                     f"{osc['coupling']:.2f} | {osc['flips_per_minute']:.1f} | "
                     f"{osc['flips_in_step']:.0%} | "
                     f"{osc['time_out_of_safe']:.1%} | {s.send_lag_p99_ms:.1f} |")
    mean = {m: (statistics.mean(o["aggregate_variance"] for n, _, _, o in turns if n == m),
                statistics.mean(s.goodput_rps for n, _, s, _ in turns if n == m))
            for m in (MODEL, SMOOTHED)}
    lines += ["", f"Mean of each: aggregate window variance {mean[SMOOTHED][0]:.4f} vs "
              f"{mean[MODEL][0]:.4f} ms^2 (**{mean[SMOOTHED][0] / mean[MODEL][0]:.2f}x** the "
              f"shipped default's), goodput {mean[SMOOTHED][1]:,.1f} vs {mean[MODEL][1]:,.1f} "
              "req/s.", ""]
    write_page(path, lines)


if __name__ == "__main__":
    raise SystemExit(main())
