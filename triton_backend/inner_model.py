"""``InnerModel``: an ordinary Triton model around one executor (real MiniLM or the
emulated device). ``minilm``, ``emulated_device`` and the native baselines ``*_native``
use it; Triton (or a BLS caller) hands it requests and it runs them as one batch."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from .executors import MINILM_MAX_SEQ_LEN, MINILM_VOCAB_SIZE
from .model_loading import (LoadRefused, check_embedding_width, instance_placement,
                            make_executor)
from .model_settings import ModelSettings, SettingsError
from .request_decoding import RequestError, decode_padded_batch
from .answers import error
from .decode import check_numpy, input_array
from .timeline import TIMELINE_ENV, Timeline


class InnerModel:
    """The Python backend's model class for an inner or native model."""

    def initialize(self, args):
        """Called once when the model loads: read and check the parameters, place the
        instance and build its executor. A bad setting refuses the load, naming it."""
        check_numpy(args["model_name"])
        self.config = json.loads(args["model_config"])
        try:
            settings = ModelSettings.from_model_config(args["model_name"], self.config)
            self.placement = instance_placement(args, settings)
            self.executor, _ = make_executor(args, settings, self.placement,
                                             pb_utils.Logger.log_warn)
            check_embedding_width(args["model_name"], self.config, self.executor)
        except (SettingsError, LoadRefused) as exc:
            raise pb_utils.TritonModelException(str(exc)) from None
        pb_utils.Logger.log_info(f"{args['model_name']}: {self.placement.why}")
        # The per-call timeline, as the explicit models keep it (only where asked for:
        # the native baseline's calls beside the plugin's, scripts/host_ledger.py).
        folder = os.environ.get(TIMELINE_ENV)
        self.timeline = Timeline(args["model_name"], folder) if folder else None

    def finalize(self):
        if self.timeline is not None:
            self.timeline.flush()

    def execute(self, requests):
        """One batch per call: every valid request's rows together; an invalid request is
        answered INVALID_ARG and the rest still run."""
        record = (self.timeline.begin(time.monotonic(), len(requests))
                  if self.timeline is not None else None)
        cpu_s = time.thread_time() if record is not None else 0.0  # the record's cpu_s
        responses: list[Any] = [None] * len(requests)
        sequences: list[np.ndarray] = []
        owners: list[tuple[int, int]] = []  # (request index, number of rows)
        for i, request in enumerate(requests):
            try:
                rows = decode_padded_batch(input_array(request, "INPUT_IDS"),
                                           MINILM_MAX_SEQ_LEN, MINILM_VOCAB_SIZE)
            except RequestError as exc:
                responses[i] = error(str(exc), pb_utils.TritonError.INVALID_ARG)
                continue
            sequences.extend(rows)
            owners.append((i, len(rows)))
        if sequences:
            started = time.monotonic()
            try:
                embeddings = self.executor.run(sequences)
            except Exception as exc:  # one failed batch fails its requests, not the model
                embeddings = None
                for i, _ in owners:
                    responses[i] = error(f"inference failed: {exc}",
                                         pb_utils.TritonError.INTERNAL)
            # The batch's span ends where the executor returned: building the responses is
            # host time, as the explicit models' timeline counts it.
            ran = time.monotonic()
            if embeddings is not None:
                offset = 0
                for i, n in owners:
                    out = pb_utils.Tensor("EMBEDDING",
                                          embeddings[offset:offset + n].astype(np.float32))
                    responses[i] = pb_utils.InferenceResponse(output_tensors=[out])
                    offset += n
            if record is not None:
                record.batch(len(sequences), 0, started, ran, 0.0, "native", ran - started)
        if record is not None:
            record.cpu_s = time.thread_time() - cpu_s
            self.timeline.end(record, time.monotonic())
        return responses

