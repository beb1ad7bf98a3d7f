"""An experiment's script, kept with its page (not a tool): each stub thread's context
switches and CPU ticks per second (/proc/<pid>/task/<tid>/status and stat), the shipped
plugin and native in turn under the same perf_analyzer load (``shipped_beside_native``,
Poisson at RATE req/s on the EMULATED device PROFILE), two rounds each; then py-spy's
thread names (PYSPY, default py-spy on PATH). From the repository root:

    [PYSPY=/path/to/py-spy] .venv/bin/python results/stub_cpu_perf/thread_switches.py PROFILE RATE MS
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
from benchmarks.hold_speed import measure, shipped_beside_native  # noqa: E402
from benchmarks.procinfo import find_stub  # noqa: E402

profile, rate, ms = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])


def snapshot(pid: int) -> dict:
    """tid -> (voluntary switches, involuntary switches, utime + stime ticks)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = open(f"/proc/{pid}/task/{tid}/status").read()
            stat = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = (int(status.split("voluntary_ctxt_switches:")[1].split()[0]),
                    int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0]),
                    int(stat[11]) + int(stat[12]))
    return out


with tempfile.TemporaryDirectory() as tmp:
    with shipped_beside_native(tmp, profile) as (server, models, data):
        pids = {m: find_stub(server.process.pid, m) for m in models}
        for m in models * 2:
            measure(server, m, data[m], rate, None, 2000)  # warm-up
            before, t0 = snapshot(pids[m]), time.monotonic()
            row = measure(server, m, data[m], rate, None, ms)
            after, dt = snapshot(pids[m]), time.monotonic() - t0
            print(f"== {m}: {row.throughput} req/s over {dt:.1f} s")
            for tid, (vol, invol, ticks) in after.items():
                v0, i0, t0_ = before.get(tid, (0, 0, 0))
                if vol - v0 or invol - i0 or ticks - t0_:
                    print(f"   tid {tid}: voluntary {(vol - v0) / dt:7.1f}/s, involuntary "
                          f"{(invol - i0) / dt:7.1f}/s, CPU {(ticks - t0_) / dt:5.1f} ticks/s")
        spy = os.environ.get("PYSPY") or shutil.which("py-spy")
        for m in models:
            dump = subprocess.run([spy, "dump", "--pid", str(pids[m])], capture_output=True,
                                  text=True).stdout if spy else ""
            print("\n".join(line for line in dump.splitlines() if line.startswith("Thread")))
