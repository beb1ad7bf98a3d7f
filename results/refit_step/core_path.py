"""An experiment's script, kept with its page (not a tool): CPU per request of the pure
core on intake hold's path, in process, no server and no adapter: a ``Scheduler`` on
h200_minilm (padded, time scale 1, ``infeasible_policy: serve_late``) takes hand-overs of
PER_CALL requests of the bench mix (``submit_all``) and decides with flush until its queue
is empty, each batch reported started and finished, its observed run the profile's cost
times a uniform draw in 1.00-1.12 (the spread of a batch's span over its estimate in the
live closed loop; the page has it). 300 warm-up calls, then 2,000 timed. From the
repository root:

    .venv/bin/python results/refit_step/core_path.py TREE PER_CALL
"""
import random
import sys
import time

tree, per_call = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, tree)
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries  # noqa: E402
from scheduler_core.contract import decide  # noqa: E402
from scheduler_core.cost_model import batch_shape, cost_ms  # noqa: E402
from scheduler_core.profile_files import load_profile, profile_path  # noqa: E402
from scheduler_core.profile_parse import with_emulation, with_overrides  # noqa: E402
from scheduler_core.request import QueuedRequest  # noqa: E402
from scheduler_core.scheduler import Scheduler  # noqa: E402

profile = with_emulation(load_profile(profile_path(
    f"{tree}/model_repository/emulated_explicit/profiles", "h200_minilm")),
    {"cost_mode": "padded", "time_scale": 1.0}, "experiment")
profile = with_overrides(profile, {"control": {"infeasible_policy": "serve_late"}}, "experiment")
scheduler = Scheduler.from_profile(profile)
mix, draw = mix_entries(SLA_CLASSES_MS, 2000), random.Random(1)
clock, sent, batches = 10.0, 0, 0


def one_call() -> None:
    global clock, sent, batches
    requests = []
    for _ in range(per_call):
        length, sla_ms = mix[sent % len(mix)]
        sent += 1
        requests.append(QueuedRequest(sent, length, clock - 0.01, sla_ms))
    scheduler.submit_all(requests, clock)
    while scheduler.queue_depth:
        decision = decide(scheduler, clock, flush=True)
        if not decision.batch:
            break
        scheduler.batch_started(decision.batch, clock)
        run_ms = cost_ms(profile.cost_model, batch_shape(
            [r.seq_len for r in decision.batch], "padded")) * draw.uniform(1.0, 1.12)
        scheduler.batch_finished(decision.batch, clock, clock + run_ms / 1000.0)
        clock += run_ms / 1000.0
        batches += 1
    clock += 0.002


for _ in range(300):
    one_call()
batches, start = 0, time.process_time()
for _ in range(2000):
    one_call()
spent = time.process_time() - start
print(f"{1e6 * spent / (2000 * per_call):.2f} us of CPU a request, "
      f"{batches / 2000:.2f} batches a call")
