"""Model folders and request tensors the integration tests build: copies of the shipped
emulated_explicit under another name and intake, and gRPC inputs for them."""

from __future__ import annotations

import os
import shutil
from typing import Callable

import numpy as np
import tritonclient.grpc as grpcclient

from tests.conftest import SHIPPED_REPOSITORY

TEMPLATE = "emulated_explicit"


def emulated_copy(repo: str, name: str, to_config: Callable[[str], str] = lambda c: c,
                  time_scale: float = 1.0, extra: str = "") -> None:
    """emulated_explicit as ``name`` in ``repo``: its config passed through ``to_config``
    (an intake's config writer), its EMULATED device slowed ``time_scale`` times, its own
    profiles, and ``extra`` config text appended."""
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, TEMPLATE), os.path.join(repo, name),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    path = os.path.join(repo, name, "config.pbtxt")
    with open(path) as fh:
        config = to_config(fh.read().replace(f'name: "{TEMPLATE}"', f'name: "{name}"'))
    config += (f'parameters {{ key: "time_scale" value: {{ string_value: "{time_scale:g}" }} }}\n'
               f'parameters {{ key: "profile_dir" value: {{ string_value: "{name}/profiles" }} }}\n'
               + extra)
    with open(path, "w") as fh:
        fh.write(config)


def grpc_inputs(rng: np.random.Generator, n: int, sla_ms: float = 600000.0) -> list:
    """INPUT_IDS of ``n`` valid token ids (random inside [CLS] ... [SEP]) and SLA_MS."""
    ids = grpcclient.InferInput("INPUT_IDS", [1, n], "INT64")
    ids.set_data_from_numpy(np.array([[101, *rng.integers(1000, 29000, n - 2), 102]],
                                     dtype=np.int64))
    sla = grpcclient.InferInput("SLA_MS", [1, 1], "FP32")
    sla.set_data_from_numpy(np.array([[sla_ms]], dtype=np.float32))
    return [ids, sla]
