"""An experiment's script, kept with its page (not a tool): how many distinct Python
functions (and C functions) one ``execute()`` call runs, the shipped plugin (intake hold)
against native's model class, in process on the fake ``triton_python_backend_utils``
(``benchmarks.call_path``'s models, h200_minilm at time scale 1, calls of PER_CALL
requests of the bench mix, after 100 calls of warm-up), by module and by function
(``sys.setprofile``). From the repository root:

    .venv/bin/python results/stub_cpu_live_split/distinct_functions.py PER_CALL CALLS
"""
import os, sys, collections
sys.path.insert(0, os.getcwd())
import benchmarks.call_path as cp
per_call, rounds = int(sys.argv[1]), int(sys.argv[2])
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm", "time_scale": "1",
             "control.refusal_late_share": "0.2", "control.infeasible_policy": "reject"}
for name in ("explicit", "native"):
    model = cp.explicit_model() if name == "explicit" else cp.native_model()
    work = cp.calls(100 + rounds, per_call, name == "explicit")
    for b in work[:100]:
        model.execute(b)
    per_fn = collections.Counter(); calls_fn = collections.Counter()
    for b in work[100:]:
        seen = set()
        def prof(frame, event, arg):
            if event == "call":
                c = frame.f_code
                key = (c.co_filename.split("site-packages/")[-1].replace(os.getcwd()+"/", ""), c.co_name, c.co_firstlineno)
                seen.add(key); calls_fn[key] += 1
            elif event == "c_call":
                key = ("C", getattr(arg, "__qualname__", str(arg)), 0)
                seen.add(key); calls_fn[key] += 1
        sys.setprofile(prof)
        model.execute(b)
        sys.setprofile(None)
        for k in seen: per_fn[k] += 1
    py = {k: v for k, v in per_fn.items() if k[0] != "C"}
    cfun = {k: v for k, v in per_fn.items() if k[0] == "C"}
    print(f"== {name}: distinct Python functions a call {sum(py.values())/rounds:.1f}, C functions {sum(cfun.values())/rounds:.1f}; Python calls a call {sum(v for k,v in calls_fn.items() if k[0]!='C')/rounds:.1f}")
    bymod = collections.Counter()
    for (f, n, l), v in py.items(): bymod[f.rsplit("/",1)[0] if "/" in f else f] += v / rounds
    for m, v in sorted(bymod.items(), key=lambda kv: -kv[1])[:10]: print(f"   {v:6.1f} {m}")
    byfile = collections.Counter()
    for (f, n, l), v in py.items(): byfile[f] += v / rounds
    for m, v in sorted(byfile.items(), key=lambda kv: -kv[1])[:30]: print(f"   {v:6.1f} {m}")
    if name == "explicit":
        for (f, n, l), v in sorted(py.items()): print(f"      {v/rounds:4.2f} {calls_fn[(f,n,l)]/rounds:6.1f} {f}:{n}")
    model.finalize()
