"""The shipped default beside native on an EMULATED device with the costs BERT-large in fp16
had inside an H200 server: 6 ms for a batch of one request, 40 ms for any larger one
(almost every larger batch had a shape the process had not run before;
results/gpu_h200_2026-12-04). The plugin's cost refit learned exactly that, and its
overload former then ran one request a call and refused the rest.

    .venv/bin/python scripts/newshape_costs.py [--rates 234 500] [--out results/newshape_costs.md]

One server, the shipped ``emulated_explicit`` and ``emulated_native`` (Triton's batcher,
delay 0, batch 64) on a profile written for the run (``h200_minilm`` with that table, time
scale 1, padded); our load generator, Poisson, the bench's length mix and SLA classes,
explicit and native on the same arrivals. With ``--label`` and ``--append`` one page holds
runs of several trees (``PYTHONPATH=TREE``).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import yaml

from benchmarks import bench_setup as BENCH
from benchmarks.bench_report_h200 import refusals
from benchmarks.bench_server import Bench
from benchmarks.hold_speed import _native
from benchmarks.pages import write_page
from benchmarks.repository import copy_model
from server_ops.launcher import TritonServer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(REPO_ROOT, "model_repository")
EXPLICIT, NATIVE = "emulated_explicit", "emulated_native"
PROFILE = "newshapes"
# (batch, length, ms): one request 6 ms, more 40 ms, at every length.
TABLE = [[b, n, 6.0 if b == 1 else 40.0] for b in (1, 2, 8, 32, 64)
         for n in (16, 64, 128, 256, 512)]


def build_repo(repo: str) -> None:
    params = {"hardware_profile": PROFILE, "time_scale": "1", "cost_mode": "padded"}
    folder = copy_model(EXPLICIT, repo, source=SOURCE, params=params)
    with open(os.path.join(folder, "profiles", "h200_minilm.yaml"), encoding="utf-8") as fh:
        profile = yaml.safe_load(fh)
    profile["name"] = PROFILE
    profile["description"] = ("EMULATED: BERT-large fp16 inside an H200 server, new shapes "
                              "(results/gpu_h200_2026-12-04)")
    profile["cost_model"]["table"] = TABLE
    profile["cost_model"]["table_source"] = "what the plugin's refit learned on the H200"
    with open(os.path.join(folder, "profiles", f"{PROFILE}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(profile, fh)
    copy_model(NATIVE, repo, source=SOURCE, edit=_native,
               params={**params, "profile_dir": f"{EXPLICIT}/profiles"})


def run(rates: list[float], seconds: float, warmup_s: float) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(repo)
        build_repo(repo)
        slas = BENCH.SLA_CLASSES_MS
        timeout_s = BENCH.CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0
        with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
            bench = Bench(server, [EXPLICIT, NATIVE])
            for rate in rates:
                arrivals = BENCH.arrivals_for("poisson", rate, seconds + warmup_s, BENCH.SEED,
                                              slas, BENCH.LENGTHS)
                row = {"rate": rate}
                for role, model in (("explicit", EXPLICIT), ("native", NATIVE)):
                    row[role] = bench.segment(role, model, arrivals, seconds,
                                              role == "explicit", timeout_s, warmup_s)
                rows.append(row)
                print(f"{rate:.0f} req/s: " + "; ".join(
                    f"{r} {row[r].attainment:.1%} in SLA, P50 {row[r].p50_ms:.1f} ms"
                    for r in ("explicit", "native")), flush=True)
    return rows


def page_rows(rows: list[dict], label: str) -> list[str]:
    out = []
    for row in rows:
        e, n = row["explicit"], row["native"]
        out.append(f"| {label} | {row['rate']:.0f} | {100 * e.attainment:.1f} | {e.p50_ms:.1f} "
                   f"| {refusals(e)} | {100 * n.attainment:.1f} | {n.p50_ms:.1f} "
                   f"| {e.goodput_rps / n.goodput_rps if n.goodput_rps else float('nan'):.2f} "
                   f"| {max(e.send_lag_p99_ms, n.send_lag_p99_ms):.1f} |")
    return out


HEADER = ["| tree | offered req/s | explicit % in SLA | explicit P50 (ms) | explicit refused "
          "| native % in SLA | native P50 (ms) | goodput explicit / native | send lag P99 (ms) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[234.0, 500.0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--append", action="store_true",
                        help="add this run's rows to the table of an existing --out page")
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "results", "newshape_costs.md"))
    args = parser.parse_args(argv)
    rows = page_rows(run(args.rates, args.seconds, args.warmup_s), args.label)
    if args.append and os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as fh:
            lines = fh.read().rstrip("\n").split("\n")
        end = max(i for i, line in enumerate(lines) if line.startswith("| "))
        write_page(args.out, lines[:end + 1] + rows + lines[end + 1:])
        return 0
    write_page(args.out, [
        "# The shipped default on an emulated device with new-shape costs (6 ms for one "
        "request, 40 ms for more)", "",
        "EMULATED device: the costs the plugin's refit learned for BERT-large in fp16 inside "
        "an H200 server ([gpu_h200_2026-12-04](gpu_h200_2026-12-04/README.md)). Every "
        "explicit figure is the shipped default, intake `hold`; native is Triton's batcher "
        "at delay 0, batch 64, on the same emulated device in the same server. Our load "
        "generator, Poisson, the bench's length mix and SLA classes 50/100/200 ms, "
        f"{args.seconds:g} s measured after {args.warmup_s:g} s; 2-core CPU host.", "",
        "Command: `.venv/bin/python scripts/newshape_costs.py --rates "
        + " ".join(f"{r:g}" for r in args.rates) + " --label LABEL [--append]` "
        "(with `PYTHONPATH=TREE` for another tree).", "",
        *HEADER, *rows])
    return 0
