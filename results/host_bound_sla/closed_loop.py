"""An experiment's script, kept with its page (not a tool): what the SLA input costs the
host-bound closed loop. The shipped plugin (intake hold) on `make bench`'s host-bound
device (h200_minilm EMULATED at time scale 0.01: the device nearly free, the host path
bounds) fed the bench mix with its `SLA_MS` input, the same mix with no SLA (every
request then has the profile's default SLA), and native (which never gets one), in one
server, perf_analyzer over gRPC at concurrency 64, ROUNDS rounds of MS each, the order
rotated round by round. From the repository root:

    .venv/bin/python results/host_bound_sla/closed_loop.py ROUNDS MS
"""
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.getcwd())
from benchmarks import hold_speed as H  # noqa: E402
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

rounds, ms = int(sys.argv[1]), int(sys.argv[2])
cases = ["explicit, SLA_MS input", "explicit, no SLA given", "native"]
rows: dict[str, list] = {case: [] for case in cases}
with tempfile.TemporaryDirectory(prefix="host-bound-sla-") as tmp:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    H.build_repo(repo, [], device="host_bound")
    with_sla = write_input_data(os.path.join(tmp, "sla.json"),
                                mix_entries(SLA_CLASSES_MS, 2000))
    without = write_input_data(os.path.join(tmp, "plain.json"), mix_entries(None, 2000))
    runs = {cases[0]: (H.SHIPPED, with_sla), cases[1]: (H.SHIPPED, without),
            cases[2]: (H.NATIVE, without)}
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for model, data in ((H.SHIPPED, with_sla), (H.NATIVE, without)):  # warm-up
            H.measure(server, model, data, 200, 0.0, 1500)
        for i in range(rounds):
            for case in cases[i % 3:] + cases[:i % 3]:
                model, data = runs[case]
                row = H.measure(server, model, data, 0, None, ms, concurrency=64,
                                protocol="grpc")
                rows[case].append(row)
                print(f"round {i} {case}: {row.throughput or 0:.0f} req/s, stub "
                      f"{row.stub_us or 0:.0f} us a request {row.error}", flush=True)
native = statistics.median(r.throughput or 0 for r in rows["native"])
for case in cases:
    rates = [r.throughput or 0 for r in rows[case]]
    stub = [r.stub_us or 0 for r in rows[case]]
    print(f"== {case}: median {statistics.median(rates):.0f} req/s "
          f"({statistics.median(rates) / native:.2f}x native), stub median "
          f"{statistics.median(stub):.0f} us a request; rounds "
          f"{', '.join(f'{x:.0f}' for x in rates)}")
