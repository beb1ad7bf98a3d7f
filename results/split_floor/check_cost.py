"""An experiment's script, kept with its page (not a tool): the thread CPU of intake
hold's launch-first check (``AsHandedRule.launches_as_handed``) per ``execute()`` call, in
process (``benchmarks.call_path``'s models on the fake ``triton_python_backend_utils``),
how often it scanned the hand-over's splits (``batch_plan._cheapest_split``), and the
danger zone's part of the as-handed checks (``AsHandedRule._emergency_forms_whole``). The
shipped default (intake hold, ``reject``), h200_minilm at time scale TS (default 0.01:
the host-bound case), calls of PER_CALL requests of the bench mix. It imports the
plugin from the working directory, so run from a worktree of another commit it measures
that commit's code. From the repository root:

    [TS=1] .venv/bin/python results/split_floor/check_cost.py PER_CALL CALLS
"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.getcwd())
import benchmarks.call_path as cp  # noqa: E402  (installs the fake pb_utils)
import scheduler_core.as_handed as as_handed  # noqa: E402
import scheduler_core.batch_plan as batch_plan  # noqa: E402

cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm",
             "time_scale": os.environ.get("TS", "0.01"),
             "control.refusal_late_share": "0.2", "control.infeasible_policy": "reject"}
spent: dict[str, list] = defaultdict(lambda: [0.0, 0])


cp.thread_timed(as_handed.AsHandedRule, "launches_as_handed", spent)
cp.thread_timed(batch_plan, "_cheapest_split", spent)
cp.thread_timed(as_handed.AsHandedRule, "_emergency_forms_whole", spent)
per_call, n_calls = int(sys.argv[1]), int(sys.argv[2])
model = cp.explicit_model()
cp.measure(model, cp.calls(300, per_call, True), False)  # warm-up
spent.clear()
cp.measure(model, cp.calls(n_calls, per_call, True), False)
check, scans = spent["launches_as_handed"], spent["_cheapest_split"]
emergency = spent["_emergency_forms_whole"]
print(f"calls of {per_call} at time scale {cp.PARAMS['time_scale']}: the launch-first check "
      f"{check[0] * 1e6 / n_calls:.1f} us a call, the split scan in "
      f"{100.0 * scans[1] / n_calls:.0f} % of calls "
      f"({scans[0] * 1e6 / n_calls:.1f} us a call); "
      f"the danger zone's check {emergency[0] * 1e6 / n_calls:.1f} us a call")
model.finalize()
