"""An experiment's script, kept with its page (not a tool): what the per-request SLA input
costs at the host-bound closed loop. Three models in one server on the EMULATED
host-bound device (h200_minilm at time scale 0.01): the shipped plugin (``x_new``,
``serve_late``) sent the bench mix with its SLA_MS tensor; native sent the mix without
it; and native with an optional SLA_MS input added to its config (``native_sla``), sent the
mix with it, which it never reads. perf_analyzer over gRPC (PROTO), the closed loop at
concurrency 64, ROUNDS rounds of MS, the order rotated. From the repository root:

    .venv/bin/python results/host_path_checks/sla_input.py host_bound MS ROUNDS
"""
import os
import sys
import tempfile

sys.path.insert(0, os.getcwd())
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data  # noqa: E402
from benchmarks.hold_speed import (NATIVE, SHIPPED, _native, add_variant,  # noqa: E402
                                   build_repo, device_params, measure)
from benchmarks.repository import copy_model  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402
from triton_backend import model_config_pb2 as mc  # noqa: E402

device, ms, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
proto = os.environ.get("PROTO", "grpc")


def native_sla(model) -> None:
    """Native, with an optional SLA_MS input (FP32 [1]) that its model.py never reads."""
    _native(model)
    sla = model.input.add()
    sla.name, sla.data_type, sla.optional = "SLA_MS", mc.TYPE_FP32, True
    sla.dims.append(1)


with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    build_repo(repo, [], device=device)
    add_variant(repo, {"control.infeasible_policy": "serve_late"}, device, name="x_new")
    copy_model(NATIVE, repo, "native_sla", edit=native_sla,
               params={**device_params(device), "profile_dir": f"{SHIPPED}/profiles"})
    runs = [("x_new", "sla"), (NATIVE, "nosla"), ("native_sla", "sla")]
    data = {"sla": write_input_data(os.path.join(tmp, "sla.json"),
                                    mix_entries(SLA_CLASSES_MS, 2000)),
            "nosla": write_input_data(os.path.join(tmp, "nosla.json"), mix_entries(None, 2000))}
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for m, d in runs:
            measure(server, m, data[d], 300, 0.0, 1500)  # warm-up
        for r in range(rounds):
            for m, d in runs[r % 3:] + runs[:r % 3]:
                row = measure(server, m, data[d], 0, 0.8, ms, concurrency=64, protocol=proto)
                print(f"round {r} {m} {d}: {row.throughput} req/s, {row.per_call:.1f}/call, "
                      f"stub {row.stub_us:.1f} us/req {row.error or ''}", flush=True)
