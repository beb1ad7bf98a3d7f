"""Fixtures for the adapter's unit tests: ``ExplicitModel`` driven in process, on the fake
``triton_python_backend_utils`` (``fake_pb_utils.py`` in this folder).

The fake is installed into ``sys.modules`` when pytest loads this file, which is before it
imports any test module of this folder, so the adapter modules (``explicit_model``,
``runner``, ``answers`` ...) bind to it. It is loaded from its path, not imported by
name, so nothing depends on how pytest puts this folder on ``sys.path``. The other tests
here import only modules that need no ``pb_utils``; the fake changes nothing for them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading

import pytest

from tests.device_gate import DeviceGate
from tests.eventually import eventually

PB_UTILS = "triton_python_backend_utils"
_FAKE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_pb_utils.py")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SHIPPED_MODEL_DIR = os.path.join(REPO_ROOT, "model_repository", "emulated_explicit")


def _install_fake_pb_utils():
    module = sys.modules.get(PB_UTILS)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(PB_UTILS, _FAKE_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[PB_UTILS] = module
    spec.loader.exec_module(module)
    return module


_FAKE = _install_fake_pb_utils()


@pytest.fixture
def pb_utils():
    """The fake pb_utils the adapter modules use, its metrics and log emptied."""
    if not getattr(_FAKE, "FAKE", False):
        pytest.skip(f"{PB_UTILS} is not this folder's fake ({_FAKE!r})")
    _FAKE.reset()
    yield _FAKE
    _FAKE.reset()


def shipped_model_config(**params: str) -> dict:
    """``model_repository/emulated_explicit/config.pbtxt`` as the JSON Triton hands
    initialize() (its protobuf as JSON: int64 fields as strings, enums by name), its
    parameters updated with ``params``."""
    from google.protobuf import json_format

    from server_ops.intake_config import parse

    with open(os.path.join(SHIPPED_MODEL_DIR, "config.pbtxt"), encoding="utf-8") as fh:
        config = json_format.MessageToDict(parse(fh.read()), preserving_proto_field_name=True)
    config["parameters"].update({k: {"string_value": v} for k, v in params.items()})
    return config


# Fast and quiet: the emulated device at 1 % of the T4's time, no sidecar, and the control
# metrics published every 10 ms (the smallest control period) so a test reads them soon.
FAST_PARAMS = {"sidecar": "off", "time_scale": "0.01", "control.control_period_ms": "10",
               "responder_threads": "2"}


class ExecutorSpy:
    """Wraps ``model.executor``'s ``launch`` (where the runner starts a batch; ``run``
    where it has none): ``batches`` holds each batch's sequences (as tuples of token ids),
    recorded when the batch reaches the executor (a batch that then fails included)."""

    def __init__(self, model):
        self.batches: list[list[tuple[int, ...]]] = []
        executor = model.executor
        name = "launch" if hasattr(executor, "launch") else "run"
        original = getattr(executor, name)

        def spied(sequences, timeout_s=0.0):
            self.batches.append([tuple(int(t) for t in s) for s in sequences])
            return original(sequences, timeout_s)

        setattr(executor, name, spied)  # the runner holds the same executor object

    @property
    def computed(self) -> list[tuple[int, ...]]:
        return [seq for batch in self.batches for seq in batch]


def instance_args(name: str, config: dict, folder: str) -> dict:
    """``initialize(args)`` as Triton builds it for instance 0 of model ``name`` (its
    ``config`` as JSON) in the model folder ``folder``, on the CPU."""
    return {"model_name": name, "model_config": json.dumps(config),
            "model_repository": folder,  # Triton passes the model's own folder
            "model_version": "1", "model_instance_kind": "CPU",
            "model_instance_name": f"{name}_0_0", "model_instance_device_id": "0"}


class Adapter:
    """Builds ``ExplicitModel``s on the shipped config; each is finalized at teardown
    (after its gate is opened, so no batch stays held)."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.gate = DeviceGate(str(tmp_path / "device.gate"))
        self._models = []

    def model(self, intake: str, gated: bool = False, **params: str):
        from triton_backend.explicit_model import ExplicitModel

        values = {**FAST_PARAMS, "intake": intake, **params}
        if gated:
            values["device_gate_file"] = self.gate.path
        model = ExplicitModel()
        model.initialize(instance_args("emulated_explicit", shipped_model_config(**values),
                                       SHIPPED_MODEL_DIR))
        self._models.append(model)
        return model

    @staticmethod
    def spy(model) -> ExecutorSpy:
        return ExecutorSpy(model)

    def held_call(self, model, requests) -> tuple[threading.Thread, list]:
        """``model.execute(requests)`` started in a thread with the device's gate closed,
        once its first batch is held at the door: (the thread, the list that receives
        what the call returns)."""
        self.gate.close()
        returned: list = []
        call = threading.Thread(target=lambda: returned.append(model.execute(requests)),
                                daemon=True)
        call.start()
        eventually(lambda: self.gate.held() == 1, what="the batch held at the device's door")
        return call, returned

    def finalize(self, model) -> None:
        """Finalize ``model`` now (once: teardown skips it)."""
        self._models.remove(model)
        model.finalize()

    def close(self) -> None:
        self.gate.open()
        while self._models:
            self._models.pop().finalize()


@pytest.fixture
def adapter(pb_utils, tmp_path):
    harness = Adapter(tmp_path)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def cancel_check_now(monkeypatch):
    """Every batch member is asked whether its client cancelled it, whatever its wait
    (runner.CANCEL_CHECK_MIN_WAIT_S = 0): no test waits for time to pass."""
    from triton_backend import runner

    monkeypatch.setattr(runner, "CANCEL_CHECK_MIN_WAIT_S", 0.0)
