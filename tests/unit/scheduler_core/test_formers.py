"""Batch formers: chosen by name, named in every decision, and costed exactly as the
cost estimator costs a batch."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from scheduler_core.control_loop import ControlLoop
from scheduler_core.cost_model import CostEstimator
from scheduler_core.entry_queue import Entry, EntryQueue
from scheduler_core.formers import FORMERS, make_former
from scheduler_core.policy import FORMER_NAMES, Mode
from scheduler_core.profile import (ControlConfig, CostModelConfig, ProfileError,
                                    SchedulerConfig, profile_from_mapping)
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler


def test_every_name_a_profile_may_give_is_a_registered_former():
    assert set(FORMERS) == set(FORMER_NAMES)
    cfg, ctl = SchedulerConfig(), ControlConfig()
    est = CostEstimator(CostModelConfig())
    for name in FORMER_NAMES:
        assert make_former(name, cfg, ctl, est).name == name


def test_an_unknown_former_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown batch former 'lifo'.*fifo"):
        make_former("lifo", SchedulerConfig(), ControlConfig(), CostEstimator(CostModelConfig()))
    with pytest.raises(ProfileError, match="control.explicit_former.*lifo"):
        profile_from_mapping({"name": "x", "control": {"explicit_former": "lifo"}}, "x.yaml")


@pytest.mark.parametrize("cost_mode, safe_former", [("padded", "length_aware"),
                                                     ("ragged", "fifo")])
def test_the_former_of_each_mode_goes_into_the_decision(cost_mode, safe_former):
    """``auto`` picks the length-aware former where padding costs, FIFO where it does not;
    the decision says which one ran even while the mode is ``default``."""
    est = CostEstimator(CostModelConfig(fixed_ms=1.0, per_token_ms=0.01), cost_mode)
    s = Scheduler(SchedulerConfig(max_batch_size=4), est, ControlConfig())
    assert {m: f.name for m, f in s.formers.items()} == {
        Mode.DEFAULT: safe_former, Mode.EXPLICIT: "length_aware",
        Mode.EMERGENCY: "length_aware_emergency"}
    for i in range(4):
        s.submit(QueuedRequest(i, 16, 0.0, 100.0), 0.0)
    d = s.schedule(0.0)
    assert d.mode == "default" and d.former == safe_former and len(d.batch) == 4
    assert s.stats(0.0).former == safe_former


cost_models = st.builds(
    CostModelConfig, fixed_ms=st.floats(0.0, 50.0), per_sequence_ms=st.floats(0.0, 2.0),
    per_token_ms=st.floats(0.0, 0.05), per_token_squared_ms=st.floats(0.0, 1e-4))


@settings(max_examples=150, deadline=None)
@given(cm=cost_models, cost_mode=st.sampled_from(["padded", "ragged"]),
       lengths=st.lists(st.integers(1, 512), min_size=1, max_size=80),
       correction=st.floats(0.05, 20.0), scale=st.floats(0.01, 50.0),
       emergency=st.booleans(), waste=st.floats(0.0, 1.0), slots=st.integers(0, 3))
def test_inlined_cost_arithmetic_equals_the_estimator(cm, cost_mode, lengths, correction,
                                                       scale, emergency, waste, slots):
    """The length-aware former costs each candidate batch inline (its hot loop); the
    batch it proposes must carry exactly the estimator's figure for those members."""
    est = CostEstimator(cm, cost_mode, scale)
    est.correction = correction
    cfg = SchedulerConfig(max_batch_size=16, max_batch_tokens=4096)
    ctl = replace(ControlConfig(), max_padding_waste=waste, priority_slots=slots)
    queue = EntryQueue()
    for i, n in enumerate(lengths):
        req = QueuedRequest(i, n, i * 1e-4, 1e6)  # deadlines far away: only costs decide
        queue.append(Entry(req, 0.0, est.base_parts_ms(1, n, n, n * n), 0.0))
    name = "length_aware_emergency" if emergency else "length_aware"
    former = make_former(name, cfg, ctl, est, small_queue=10 ** 9)
    state = ControlLoop(cfg, ctl).state
    candidate = former.form(queue, state, 0.01, flush=False)
    members = [e.seq_len for e in candidate.entries]
    assert candidate.estimated_ms == est.estimate_ms(members)
