"""An experiment's script, kept with its page (not a tool): ``perf record`` (cpu-clock at
1999 Hz, call graphs) on each stub in turn, the shipped plugin (``emulated_explicit``) and
native, under the same perf_analyzer load (``hold_speed.shipped_beside_native``: the bench
mix, Poisson at RATE req/s, on the EMULATED device PROFILE), ROUNDS rounds alternated.
perf samples C, C++ and kernel frames without pausing the stub (py-spy --native pauses it
at every sample, which broke the plugin's timing here). From the repository root:

    .venv/bin/python results/stub_cpu_perf/perf_stubs.py PROFILE RATE SECONDS OUTDIR [ROUNDS]

then, per file, samples by thread and library (the sample's own frame):

    perf script -i OUTDIR/M.rN.data -F tid,ip,dso --hide-call-graph | awk '{print $1, $3}' | sort | uniq -c
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
from benchmarks.hold_speed import measure, shipped_beside_native  # noqa: E402
from benchmarks.procinfo import find_stub  # noqa: E402

profile, rate, seconds, outdir = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 1
os.makedirs(outdir, exist_ok=True)
with tempfile.TemporaryDirectory() as tmp:
    with shipped_beside_native(tmp, profile) as (server, models, data):
        pids = {m: find_stub(server.process.pid, m) for m in models}
        for r in range(rounds):
            for m in (models if r % 2 == 0 else models[::-1]):
                measure(server, m, data[m], rate, None, 3000)  # warm-up
                out = os.path.join(outdir, f"{m}.r{r}.data")
                perf = subprocess.Popen(["perf", "record", "-F", "1999", "-g", "-p",
                                         str(pids[m]), "-o", out],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.3)  # attached
                row = measure(server, m, data[m], rate, None, seconds * 1000)
                perf.send_signal(signal.SIGINT)
                perf.wait(timeout=60)
                print(r, m, row.throughput, row.p50_ms, row.error[:60], flush=True)
