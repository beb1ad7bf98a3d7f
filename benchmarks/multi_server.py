"""Several tritonservers behind HAProxy on ONE machine, standing in for replicas behind a
Kubernetes Service (docs/scale-out.md): the shipped ``emulated_explicit`` (EMULATED t4,
slowed by a time scale so that 2 shared cores can drive three servers; SLA classes
scaled alike) in each server, HAProxy balancing gRPC requests round-robin, one open-loop
load generator. The same Poisson arrivals go to 1, 2 and 3 servers; during the 3-server
run every server's zone and elastic window are scraped, for cross-server oscillation.

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
import subprocess
import tempfile
import time

from benchmarks import benchmark as B
from benchmarks.loadgen import run_load
from benchmarks.oscillation import SAMPLE_S, ZoneSampler
from benchmarks.pages import write_page
from benchmarks.repository import copy_model
from scheduler_core import workload as W
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.simulator import capacity_rps
from triton_backend.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer, free_ports

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "multi_server.md")
MODEL = "emulated_explicit"
SERVERS = 3
TIME_SCALE = 20.0
LOAD = 0.6  # of the three servers' capacity together
SLA_CLASSES_MS = tuple(s * TIME_SCALE for s in (50.0, 100.0, 200.0))
LENGTHS = W.LogNormalLengths(median=64.0, sigma=0.8, lo=16, hi=512)
WARMUP_S, MEASURE_S, SEED = 3.0, 20.0, 11
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
    profile = load_profile(profile_path(os.path.join(DEFAULT_MODEL_REPOSITORY, MODEL,
                                                     "profiles"), "t4"))
    lengths = W.sample_lengths(20_000, 1, LENGTHS)
    return capacity_rps(profile.cost_model, "padded", TIME_SCALE, lengths,
                        profile.scheduler.max_batch_size, profile.scheduler.max_batch_tokens)


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


def fresh(server: TritonServer, timeout_s: float = 120.0) -> None:
    """Unload and load the model again: a fresh queue, controller and cost refit."""
    server.unload_model(MODEL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            server.load_model(MODEL)
            return
        except RuntimeError:  # the unload has not finished yet
            time.sleep(0.5)
    raise RuntimeError(f"{MODEL} did not load again within {timeout_s:g} s")


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
    rows, osc = [], None
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(repo)
        copy_model(MODEL, repo, params={"time_scale": f"{TIME_SCALE:g}",
                                        "hardware_profile": "t4"})
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
                for srv in servers:  # every run starts from fresh controllers
                    fresh(srv)
                proxy, url = _haproxy(tmp, servers[:k])
                try:
                    sampler = ZoneSampler([(srv.metrics_url, {"model": MODEL})
                                           for srv in servers[:k]])
                    with sampler:
                        result = run_load(url, MODEL, arrivals, clients=4, drain_timeout_s=60.0)
                    stats = B.measured_stats("explicit",
                                             result.window(WARMUP_S, WARMUP_S + MEASURE_S))
                    rows.append((k, result, stats))
                    if k == SERVERS:
                        osc = sampler.oscillation()
                    print(f"{k} server(s): goodput {stats.goodput_rps:.1f} req/s, "
                          f"{stats.attainment:.1%} in SLA, lost {result.lost}", flush=True)
                finally:
                    proxy.send_signal(signal.SIGTERM)
                    proxy.wait(timeout=10)
        finally:
            for srv in servers:
                srv.stop()
    write_report(args.out, cap, offered, rows, osc)
    return 0


def write_report(path: str, cap: float, offered: float, rows, osc) -> None:
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
    if osc:
        lines += ["", f"Across the {SERVERS} servers during the {SERVERS}-server run (zone and "
                  f"window gauges scraped every {SAMPLE_S:g} s, {osc['samples']} samples): "
                  f"aggregate window variance {osc['aggregate_variance']:.4f} ms^2, coupling "
                  f"index {osc['coupling']:.2f} (1: independent windows, {SERVERS}: lockstep), "
                  f"zone flips {osc['flips_per_minute']:.1f} per minute over all servers, "
                  f"{osc['time_out_of_safe']:.1%} of the samples outside the safe zone.", ""]
    write_page(path, lines)


if __name__ == "__main__":
    raise SystemExit(main())
