"""The stub supervisor: which processes are a model's stubs, and what counts as a crash
(a stub gone with no replacement while Triton still reports the model ready)."""

from __future__ import annotations

from server_ops.supervisor import StubSupervisor, stub_pids

STUB = "/opt/tritonserver/backends/python/triton_python_backend_stub"


def _proc(root, pid: int, ppid: int, argv: list[str]) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_text(f"{pid} (triton_python_ba) S {ppid} {pid} {pid} 0 -1\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def _stub(root, pid: int, ppid: int, model: str) -> None:
    _proc(root, pid, ppid, [STUB, f"/models/{model}/1/model.py", "triton_python_backend_shm",
                            "1048576", "1048576", str(ppid), "/opt/backends/python", "0",
                            f"{model}_0_0"])


def test_stub_pids_picks_this_servers_stubs_of_this_model(tmp_path):
    _stub(tmp_path, 11, 10, "emulated_explicit")
    _stub(tmp_path, 12, 10, "emulated_explicit_bls")  # another model, a longer name
    _stub(tmp_path, 13, 99, "emulated_explicit")  # another server's
    _proc(tmp_path, 14, 10, ["/usr/bin/python3", "/models/emulated_explicit/1/model.py"])
    (tmp_path / "self").mkdir()
    assert stub_pids(10, "emulated_explicit", str(tmp_path)) == {11}
    assert stub_pids(10, "emulated_explicit_bls", str(tmp_path)) == {12}


class _Sup(StubSupervisor):
    def __init__(self, proc, ready=True):
        super().__init__(10, "localhost:1", ["m"], log=lambda _: None, proc=proc)
        self.is_ready, self.reloaded = ready, []

    def ready(self, model):
        return self.is_ready

    def reload(self, model, dead, attempt=1):
        self.reloaded.append((model, dead))
        return True


def test_a_lost_stub_without_replacement_is_a_crash_a_replaced_one_a_reload(tmp_path):
    import shutil

    _stub(tmp_path, 11, 10, "m")
    sup = _Sup(str(tmp_path))
    assert sup.check() == []  # first sight
    _stub(tmp_path, 12, 10, "m")  # a reload starts the new stub before the old one ends
    shutil.rmtree(tmp_path / "11")
    assert sup.check() == [] and sup.reloaded == []
    shutil.rmtree(tmp_path / "12")  # gone, nothing new: a crash
    assert sup.check() == ["m"] and sup.reloaded == [("m", {12})]


def test_an_unloaded_model_is_left_alone(tmp_path):
    import shutil

    _stub(tmp_path, 11, 10, "m")
    sup = _Sup(str(tmp_path), ready=False)
    sup.check()
    shutil.rmtree(tmp_path / "11")
    assert sup.check() == [] and sup.reloaded == []


def test_one_of_two_instances_dying_is_a_crash_of_the_model(tmp_path):
    import shutil

    _stub(tmp_path, 11, 10, "m")  # instance_group count 2: two stubs of one model
    _stub(tmp_path, 12, 10, "m")
    sup = _Sup(str(tmp_path))
    assert sup.check() == []
    assert stub_pids(10, "m", str(tmp_path)) == {11, 12}
    shutil.rmtree(tmp_path / "12")
    assert sup.check() == ["m"] and sup.reloaded == [("m", {12})]


class _FailingLoads(StubSupervisor):
    """The real reload path with a load API that fails ``failures`` times, on a fake clock."""

    def __init__(self, proc, failures: int):
        self.now, self.loads, self.failures, self.lines = 100.0, [], failures, []
        super().__init__(10, "localhost:1", ["m"], log=self.lines.append, proc=proc,
                         clock=lambda: self.now)

    def ready(self, model):
        return True

    def _load(self, model):
        self.loads.append(self.now)
        if len(self.loads) <= self.failures:
            raise OSError("connection refused")


def test_a_failed_reload_is_tried_again_with_a_doubling_backoff_and_each_try_logged(tmp_path):
    import shutil

    _stub(tmp_path, 11, 10, "m")
    sup = _FailingLoads(str(tmp_path), failures=3)
    sup.check()
    shutil.rmtree(tmp_path / "11")  # a crash
    for _ in range(40):  # rounds every 0.5 s: 20 s
        sup.check()
        sup.now += 0.5
    assert [t - sup.loads[0] for t in sup.loads] == [0.0, 1.0, 3.0, 7.0]  # 1, 2, 4 s apart
    assert sup.reloads["m"] == 1 and "m" not in sup._retry
    tries = [line for line in sup.lines if "reloading the model" in line]
    assert tries[0].endswith("reloading the model") and tries[-1].endswith("(try 4)")
    assert [line for line in sup.lines if "try 2 in" in line] == ["supervisor: m: try 2 in 1 s"]


def test_the_backoff_is_capped(tmp_path):
    import shutil

    _stub(tmp_path, 11, 10, "m")
    sup = _FailingLoads(str(tmp_path), failures=10 ** 6)
    sup.check()
    shutil.rmtree(tmp_path / "11")
    for _ in range(2000):  # 1000 s of rounds
        sup.check()
        sup.now += 0.5
    gaps = [b - a for a, b in zip(sup.loads, sup.loads[1:])]
    assert max(gaps) == 60.0 and gaps[:3] == [1.0, 2.0, 4.0]
