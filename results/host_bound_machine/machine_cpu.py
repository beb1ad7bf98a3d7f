"""An experiment's script, kept with its page (not a tool): where the machine's CPU goes
per answered request in ``make bench``'s host-bound closed loop, process by process. One
server, the shipped plugin (``x_new``; ``control.infeasible_policy: serve_late``, as the
bench's closed loops run it) and native (``benchmarks.hold_speed``'s models) on the
host-bound device (h200_minilm EMULATED at time scale 0.01), perf_analyzer over HTTP at
concurrency 64, the bench mix, rotated round by round. Per round and model: req/s, the
model's stub, tritonserver itself (every thread; the stubs are their own processes),
perf_analyzer (the children's rusage) and the machine's idle time (/proc/stat), each in
us of CPU per answered request. From the repository root:

    .venv/bin/python results/host_bound_machine/machine_cpu.py MS ROUNDS
"""
import os
import sys
import tempfile

sys.path.insert(0, os.getcwd())
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data  # noqa: E402
from benchmarks.hold_speed import NATIVE, add_variant, build_repo, measure  # noqa: E402
from benchmarks.procinfo import children_cpu_s, cpu_s, find_stub  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

PLUGIN = "x_new"
ms, rounds = int(sys.argv[1]), int(sys.argv[2])
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def idle_s() -> float:
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:]
    return (int(fields[3]) + int(fields[4])) * TICK_S  # idle + iowait, every CPU


with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    build_repo(repo, [], device="host_bound")
    add_variant(repo, {"control.infeasible_policy": "serve_late"}, "host_bound", name=PLUGIN)
    models = [PLUGIN, NATIVE]
    data = {PLUGIN: write_input_data(os.path.join(tmp, "sla.json"),
                                     mix_entries(SLA_CLASSES_MS, 2000)),
            NATIVE: write_input_data(os.path.join(tmp, "mix.json"), mix_entries(None, 2000))}
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        server_pid = server.process.pid
        for model in models:  # warm-up
            measure(server, model, data[model], 0.0, None, 1500, concurrency=64)
        for r in range(rounds):
            for model in models[r % 2:] + models[:r % 2]:
                stub = find_stub(server_pid, model)
                before = cpu_s(stub), cpu_s(server_pid), children_cpu_s(), idle_s()
                row = measure(server, model, data[model], 0.0, None, ms, concurrency=64)
                after = cpu_s(stub), cpu_s(server_pid), children_cpu_s(), idle_s()
                n = row.answered or 1
                stub_us, triton_us, pa_us, idle_us = ((a - b) * 1e6 / n
                                                      for a, b in zip(after, before))
                print(f"round {r + 1} {model}: {row.throughput or 0:.0f} req/s, "
                      f"{row.per_call or 0:.1f} requests a call, P50 {row.p50_ms or 0:.1f} ms; "
                      f"CPU us a request: stub {stub_us:.1f}, tritonserver {triton_us:.1f}, "
                      f"perf_analyzer {pa_us:.1f}, idle {idle_us:.1f}", flush=True)
