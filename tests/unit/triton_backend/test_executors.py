"""The emulated device, deterministic embeddings and padding helpers (no MiniLM here)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, strategies as st

from scheduler_core.profile import CostModelConfig, EmulationConfig
from triton_backend import executors
from triton_backend.executors import (EMBEDDING_DIM, EmulatedDevice, Finished, bucketed_batch,
                                      deterministic_embedding, launch, pad_batch, unpad_rows)

# Powers of two keep the expected costs exact.
COST = CostModelConfig(fixed_ms=1.0, per_sequence_ms=0.5, per_token_ms=0.25,
                       per_token_squared_ms=0.125)


@pytest.mark.parametrize("mode,scale,expected", [
    # padded: 1 + 0.5*3 + 0.25*(3*5) + 0.125*(3*25) = 15.625
    ("padded", 1.0, 15.625),
    ("padded", 2.0, 31.25),
    # ragged: 1 + 0.5*3 + 0.25*10 + 0.125*(4+25+9) = 9.75
    ("ragged", 1.0, 9.75),
    ("ragged", 0.5, 4.875),
])
def test_batch_ms_formula_and_time_scale(mode, scale, expected):
    dev = EmulatedDevice(COST, EmulationConfig(cost_mode=mode, time_scale=scale))
    assert dev.batch_ms([2, 5, 3]) == expected


def test_batch_ms_padded_costs_more_than_ragged_for_uneven_batch():
    padded = EmulatedDevice(COST, EmulationConfig("padded", 1.0))
    ragged = EmulatedDevice(COST, EmulationConfig("ragged", 1.0))
    assert padded.batch_ms([1, 64]) > ragged.batch_ms([1, 64])
    assert padded.batch_ms([8, 8]) == ragged.batch_ms([8, 8])


def test_run_takes_at_least_batch_ms_and_returns_unit_rows():
    tiny = CostModelConfig(fixed_ms=2.0, per_sequence_ms=0.5, per_token_ms=0.0,
                           per_token_squared_ms=0.0)
    dev = EmulatedDevice(tiny, EmulationConfig("padded", 1.0))
    seqs = [np.array([5, 6, 7], dtype=np.int64), np.array([8], dtype=np.int64)]
    assert dev.batch_ms([3, 1]) == 3.0
    t0 = time.perf_counter()
    out = dev.run(seqs)
    elapsed_ms = (time.perf_counter() - t0) * 1000.0
    assert elapsed_ms >= 3.0  # it sleeps the batch's cost: a floor, never a ceiling
    assert out.shape == (2, EMBEDDING_DIM) == (2, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(out[0], deterministic_embedding(seqs[0]))
    np.testing.assert_array_equal(out[1], deterministic_embedding(seqs[1]))


def test_run_time_scale_stretches_sleep():
    tiny = CostModelConfig(fixed_ms=2.0, per_sequence_ms=0.0, per_token_ms=0.0,
                           per_token_squared_ms=0.0)
    dev = EmulatedDevice(tiny, EmulationConfig("padded", 3.0))
    t0 = time.perf_counter()
    dev.run([np.array([1], dtype=np.int64)])
    assert (time.perf_counter() - t0) * 1000.0 >= 6.0


FLAT_50MS = CostModelConfig(fixed_ms=50.0, per_sequence_ms=0.0, per_token_ms=0.0,
                            per_token_squared_ms=0.0)
SEQS = [np.array([5, 6, 7], dtype=np.int64), np.array([8], dtype=np.int64)]


class FakeTime:
    """``executors``' clock: it moves only when the test or a sleep moves it."""

    def __init__(self):
        self.now, self.slept = 100.0, []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time(monkeypatch):
    clock = FakeTime()
    monkeypatch.setattr(executors, "time", clock)
    return clock


def test_a_launched_batch_runs_while_the_host_works(fake_time):
    """A launch's batch ends its cost after the launch, whatever the host does meanwhile: a
    host that worked past that end finds it done (``result`` does not wait), and its span
    is the batch's cost, not the host's work."""
    dev = EmulatedDevice(FLAT_50MS, EmulationConfig("padded", 1.0))
    flight = dev.launch(SEQS)
    fake_time.now += 0.08  # the host's work, longer than the batch
    out = flight.result()
    assert not flight.waited and fake_time.slept == []
    assert flight.device_s == pytest.approx(0.05)
    np.testing.assert_array_equal(out, np.stack([deterministic_embedding(s) for s in SEQS]))


def test_a_result_asked_for_early_waits_for_the_batch(fake_time):
    dev = EmulatedDevice(FLAT_50MS, EmulationConfig("padded", 1.0))
    flight = dev.launch(SEQS)
    fake_time.now += 0.01  # the host's work, shorter than the batch
    flight.result()
    assert flight.waited and fake_time.slept == [pytest.approx(0.04)]
    assert flight.device_s == pytest.approx(0.05)


def test_an_executor_without_launch_runs_its_batch_inside_launch():
    class RunOnly:
        def run(self, items, timeout_s=0.0):
            return [len(s) for s in items]

    flight = launch(RunOnly(), SEQS)
    assert isinstance(flight, Finished) and not flight.waited and flight.device_s >= 0.0
    assert flight.result() == [3, 1]


def test_deterministic_embedding_same_ids_same_vector():
    a = deterministic_embedding(np.array([101, 2023, 102], dtype=np.int64))
    b = deterministic_embedding(np.array([101, 2023, 102], dtype=np.int64))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (EMBEDDING_DIM,) and a.dtype == np.float32
    assert abs(float(np.linalg.norm(a)) - 1.0) < 1e-5
    # the dtype of the caller's array does not matter, only the ids
    c = deterministic_embedding(np.array([101, 2023, 102], dtype=np.int32))
    np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("other", [[101, 2024, 102], [101, 2023], [102, 2023, 101],
                                   [101, 2023, 102, 0]])
def test_deterministic_embedding_different_ids_different_vector(other):
    a = deterministic_embedding(np.array([101, 2023, 102], dtype=np.int64))
    b = deterministic_embedding(np.array(other, dtype=np.int64))
    assert not np.array_equal(a, b)
    assert float(np.dot(a, b)) < 0.5  # random unit vectors in 384-d are nearly orthogonal


def test_pad_batch_layout():
    out = pad_batch([np.array([3, 4, 5]), np.array([7]), np.array([8, 9])])
    assert out.dtype == np.int64
    assert out.tolist() == [[3, 4, 5], [7, 0, 0], [8, 9, 0]]


def test_pad_batch_custom_pad_id():
    assert pad_batch([np.array([1, 2]), np.array([3])], pad_id=-1).tolist() == [[1, 2], [3, -1]]


def test_unpad_rows():
    rows = unpad_rows(np.array([[3, 4, 5], [7, 0, 0]], dtype=np.int64))
    assert [r.tolist() for r in rows] == [[3, 4, 5], [7]]


@given(st.lists(st.lists(st.integers(1, 30521), min_size=1, max_size=32), min_size=1,
                max_size=16))
def test_pad_unpad_round_trip(seqs):
    arrays = [np.array(s, dtype=np.int64) for s in seqs]
    padded = pad_batch(arrays)
    assert padded.shape == (len(seqs), max(len(s) for s in seqs))
    back = unpad_rows(padded)
    assert [b.tolist() for b in back] == seqs


@pytest.mark.parametrize("rows, longest, shape", [
    (1, 5, (1, 64)), (3, 64, (4, 64)), (5, 65, (8, 128)), (64, 512, (64, 512)),
])
def test_shape_buckets_bound_the_shapes_and_keep_every_real_row(rows, longest, shape):
    seqs = [np.arange(1, longest + 1 - i % 3) for i in range(rows)]
    out = bucketed_batch(seqs, 64)
    assert out.shape == shape
    assert np.array_equal(out[:rows, :longest], pad_batch(seqs))
    assert not out[:rows, longest:].any()
    assert (out[rows:, 0] == 101).all() and not out[rows:, 1:].any()  # no all-padding row


def test_a_bucket_never_pads_past_the_models_positions():
    assert bucketed_batch([np.arange(1, 513)], 100).shape == (1, 512)
    assert bucketed_batch([np.arange(1, 402)], 100).shape == (1, 500)


def test_without_buckets_the_batch_is_padded_to_its_longest_only():
    seqs = [np.arange(1, 4), np.arange(1, 7)]
    assert np.array_equal(bucketed_batch(seqs, 0), pad_batch(seqs))
