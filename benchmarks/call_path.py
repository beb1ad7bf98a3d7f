"""Host cost of one execute() call, per request, in process: the plugin's shipped default
(intake hold) against native's model class, on the fake ``triton_python_backend_utils``
(tests/unit/triton_backend), the EMULATED device at a near-zero time scale.

It isolates the plugin's own Python per call from Triton, the stub's C++ and the other
processes sharing the cores (what /proc and py-spy measure in ``scripts/hold_speed.py``):
the same calls, of ``--per-call`` requests of the bench mix (lengths 8-512, SLA classes
50/100/200 ms), CPU time per request, and with ``--profile`` the top functions.

    .venv/bin/python scripts/call_path.py [--calls 3000] [--per-call 17] [--repeat 3]
        [--profile] [--evict-mb 16] [--out results/call_path.md]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time

import numpy as np

from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries
from benchmarks.intake_check import FLAT
from benchmarks.pages import write_page
# Importing the tests' conftest installs the fake pb_utils before any adapter module loads
# (they are imported inside the functions below).
from tests.unit.triton_backend.conftest import (SHIPPED_MODEL_DIR, _install_fake_pb_utils,
                                               instance_args, shipped_model_config)

pb_utils = _install_fake_pb_utils()

# The flat GPU-like profile (a fixed 3.9 ms a batch), at 1 % of its time: the
# device's sleeps are not CPU time, and the calls go by quickly.
PARAMS = {"sidecar": "off", **FLAT, "time_scale": "0.01"}


def explicit_model():
    from triton_backend.explicit_model import ExplicitModel
    model = ExplicitModel()
    model.initialize(instance_args("emulated_explicit", shipped_model_config(**PARAMS),
                                   SHIPPED_MODEL_DIR))
    return model


def native_model():
    """Native's model class on ``PARAMS``' device (t4 where they name no profile), the
    scheduler's settings (``control.*``) left out: there is no scheduler here."""
    from triton_backend.inner_model import InnerModel
    config = shipped_model_config(**PARAMS)
    params = {k: v for k, v in PARAMS.items() if not k.startswith("control.")}
    params.update(executor="emulated", profile_dir="emulated_explicit/profiles")
    params.setdefault("hardware_profile", "t4")
    config["parameters"] = {k: {"string_value": v} for k, v in params.items()}
    model = InnerModel()
    model.initialize(instance_args("emulated_native", config,
                                   os.path.join(os.path.dirname(SHIPPED_MODEL_DIR),
                                                "emulated_native")))
    return model


def calls(n_calls: int, per_call: int, with_sla: bool) -> list[list]:
    entries = mix_entries(SLA_CLASSES_MS if with_sla else None, 2000)
    out, k = [], 0
    for _ in range(n_calls):
        batch = []
        for _ in range(per_call):
            length, sla = entries[k % len(entries)]
            ids = (np.arange(length, dtype=np.int64) + k) % 30000 + 1
            k += 1
            batch.append(pb_utils.FakeRequest(ids.reshape(1, -1), sla_ms=sla))
        out.append(batch)
    return out


def thread_timed(owner, name: str, spent: dict, label: str | None = None) -> None:
    """Wrap ``owner.name`` (a class's method or a module's function) so each call adds its
    own thread CPU (s) and one call to ``spent[label or name]``, a ``[seconds, calls]``
    row (``spent`` a ``defaultdict(lambda: [0.0, 0])``): the experiments' per-part
    timing."""
    inner, key = getattr(owner, name), label or name

    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            row = spent[key]
            row[0] += time.thread_time() - start
            row[1] += 1
    setattr(owner, name, wrapper)


def measure(model, work: list[list], profile: bool, evict: np.ndarray | None = None) -> float:
    """CPU microseconds per request over ``work``; with ``evict``, the array is read
    between calls (not counted), so each call starts with the caches holding something
    else, as the stub's does after the device's wait (the other processes ran meanwhile)."""
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    spent = 0.0
    for batch in work:
        if evict is not None:
            evict.sum()
        start = time.process_time()
        model.execute(batch)
        spent += time.process_time() - start
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
    return 1e6 * spent / sum(len(b) for b in work)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """CPU microseconds per request, by model class (printed as it goes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--per-call", type=int, default=17)
    parser.add_argument("--repeat", type=int, default=1,
                        help="alternate the two this many times; the median of each is kept")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--evict-mb", type=int, default=0,
                        help="read this many MB between calls (not counted): calls start cold")
    parser.add_argument("--out", default="", help="write a results page here")
    args = parser.parse_args(argv)
    runs: dict[str, list[float]] = {"native": [], "explicit (hold)": []}
    evict = np.ones(args.evict_mb * 2**20 // 8) if args.evict_mb else None
    for _ in range(args.repeat):
        for name, make, with_sla in (("native", native_model, False),
                                     ("explicit (hold)", explicit_model, True)):
            model = make()
            try:
                measure(model, calls(200, args.per_call, with_sla), False)  # warm-up
                runs[name].append(measure(model, calls(args.calls, args.per_call, with_sla),
                                          args.profile, evict))
            finally:
                model.finalize()
            print(f"{name}: {runs[name][-1]:.1f} us CPU per request", flush=True)
    results = {name: statistics.median(values) for name, values in runs.items()}
    ratio = results["explicit (hold)"] / results["native"]
    print(f"median of {args.repeat}: ratio explicit/native: {ratio:.2f}")
    if args.out:
        write_page(args.out, [
            "# The plugin's own CPU per request of one execute() call (in process)", "",
            f"Generated by `.venv/bin/python scripts/call_path.py --calls {args.calls} "
            f"--per-call {args.per_call} --repeat {args.repeat}"
            + (f" --evict-mb {args.evict_mb}" if args.evict_mb else "")
            + " --out ...` on this machine "
            "(2 shared cores). Both model classes run on the fake `triton_python_backend_utils` "
            "of tests/unit/triton_backend, the EMULATED device on the flat profile at time "
            "scale 0.01 (its sleeps are not CPU time; its deterministic embeddings are, for "
            "both); calls of the bench mix. Not Triton's or the stub's C++ cost: "
            "results/hold_speed.md has the whole stub's.", "",
            "| model class | CPU per request (us), each run | median |", "|---|---|---:|",
            *(f"| {name} | {', '.join(f'{v:.1f}' for v in values)} | {results[name]:.1f} |"
              for name, values in runs.items()),
            "", f"Ratio explicit / native: **{ratio:.2f}**."])
    return results
