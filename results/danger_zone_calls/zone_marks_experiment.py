"""One-off instrumentation, not shipped: patches a ``git worktree`` of the plugin so each
call's timeline record also carries the zone detector's reading at the call's end
(``marks.z``: zone, score, the three pressures, the utilisation acted on). Run it in the
worktree's root, then a benchmark from there with ``EXPLICIT_BATCHING_TIMELINE_DIR`` set;
``timeline_formers.py`` sums the records up (results/danger_zone_calls/README.md)."""

p = "triton_backend/timeline.py"
s = open(p).read()
s = s.replace("    return_s: float = 0.0\n",
              "    return_s: float = 0.0\n    marks: dict = field(default_factory=dict)\n", 1)
open(p, "w").write(s)
p = "triton_backend/hold_driver.py"
s = open(p).read()
old = """        returned = answers.returned()
        done = self._clock()"""
assert old in s
s = s.replace(old, """        _z = runner.scheduler.controller.zones
        record.marks['z'] = (int(_z.zone), round(_z.score, 3), [round(x, 3) for x in _z.pressures],
                             round(runner.scheduler.controller.state.observation.utilization, 3))
        returned = answers.returned()
        done = self._clock()""")
open(p, "w").write(s)
