"""An experiment's script, kept with its page (not a tool): the main thread's CPU per
request of several models' ``execute()`` calls in one process, one call of each in turn,
the caches evicted (a 16 MB read, not counted) before every call, so each call starts
cold as the stub's does live and every model sees the same machine at the same moments
(on 2 shared cores, two processes run one after the other differ by more than the effect).
``benchmarks.call_path``'s models on the fake ``triton_python_backend_utils``: the
shipped plugin (intake hold) and native's model class, h200_minilm, time scale TS
(default 1: the device's sleeps are real), calls of PER_CALL requests of the bench mix.
MODEL names:

* ``native``, ``explicit``;
* ``explicit_no<part>...``: the plugin with parts replaced by no-ops (an upper bound on
  what the part costs, its knock-on effects included): ``observe`` (a batch's deferred
  feedback), ``took`` (``Engine.took_launched``), ``ended`` (``Engine.ended``), ``tick``,
  ``timeline`` (``Timeline.end``), ``refit``, ``windows`` (``Controller.batch_observed``),
  ``metrics`` (``on_batch``, ``on_served``), ``launches`` (a fixed 5 ms estimate);
* ``native+K[xR]``: native calling K distinct trivial Python functions (each on its own
  object) R times before each call: what a function costs the call cold.

It imports the plugin from the working directory, so run from a worktree of another
commit it measures that commit's code. From the repository root:

    [TS=1] .venv/bin/python results/batched_feedback/interleave.py PER_CALL ROUNDS MODEL...
"""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import numpy as np  # noqa: E402

import benchmarks.call_path as cp  # noqa: E402  (installs the fake pb_utils)

per_call, rounds = int(sys.argv[1]), int(sys.argv[2])
names = sys.argv[3:] or ["native", "explicit"]
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm",
             "time_scale": os.environ.get("TS", "1"),
             "control.refusal_late_share": "0.2", "control.infeasible_policy": "reject"}


def noop(*args, **kwargs):
    return None


def without(model, name: str) -> None:
    """The plugin ``model`` with the parts ``name`` lists as no-ops (on this instance)."""
    runner = model.runner
    engine, scheduler = runner.engine, runner.scheduler
    parts = {"observe": [(runner, "_observe")], "took": [(engine, "took_launched")],
             "ended": [(engine, "ended")], "tick": [(scheduler.controller, "tick")],
             "timeline": [(model.driver.timeline, "end")],
             "refit": [(scheduler.estimator, "observe")],
             "windows": [(scheduler.controller, "batch_observed")],
             "metrics": [(runner.metrics, "on_batch"), (runner.metrics, "on_served")]}
    for part, targets in parts.items():
        if "no" + part in name:
            for owner, attr in targets:
                setattr(owner, attr, noop)
    if "nolaunches" in name:
        engine.launches = lambda now_s, lengths, arrival_s: 5.0


class Slot:
    def __init__(self):
        self.a, self.b, self.c = 1, [1, 2, 3], {"x": 1}


def padded(model, functions: int, repeat: int):
    """``model`` calling ``functions`` distinct trivial functions ``repeat`` times a call."""
    code = []
    for j in range(functions):
        scope: dict = {}
        exec(f"def f{j}(o):\n    x = o.a + len(o.b)\n    o.c['x'] = x + {j}\n    return x",
             scope)
        code.append((scope[f"f{j}"], Slot()))
    inner = model.execute

    def execute(requests):
        for _ in range(repeat):
            for function, slot in code:
                function(slot)
        return inner(requests)
    model.execute = execute


def build(name: str):
    if name.startswith("native"):
        model = cp.native_model()
        if name.startswith("native+"):
            functions, _, repeat = name[len("native+"):].partition("x")
            padded(model, int(functions), int(repeat or 1))
        return model
    model = cp.explicit_model()
    without(model, name)
    return model


models = {name: build(name) for name in names}
work = {name: cp.calls(100 + rounds, per_call, not name.startswith("native"))
        for name in names}
for name, model in models.items():  # warm-up
    for batch in work[name][:100]:
        model.execute(batch)
evict = np.ones(16 * 2**20 // 8)
cpu = dict.fromkeys(names, 0.0)
for i in range(rounds):
    k = i % len(names)
    for name in names[k:] + names[:k]:  # each model first in turn
        evict.sum()
        start = time.thread_time()
        models[name].execute(work[name][100 + i])
        cpu[name] += time.thread_time() - start
for name in names:
    line = f"{name:36s} {cpu[name] * 1e6 / (rounds * per_call):7.1f} us a request"
    if "native" in cpu:
        line += f"  {cpu[name] / cpu['native']:.3f}x native"
    print(line, flush=True)
for model in models.values():
    model.finalize()
