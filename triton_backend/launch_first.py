"""Intake hold's launch first, for ``runner.Runner`` (a base, as ``scheduler_core``'s
as-handed rule is ``Scheduler``'s): a call's batch goes to the device as soon as its
token sequences are read and checked, where the engine takes the call whole from its
lengths alone (``Engine.launches``); its members, the rest of its decoding, the engine's
step and its counts come beside the device (``run_launched``). ``HoldDriver`` drives it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

from scheduler_core.engine import Step
from scheduler_core.request import QueuedRequest

from .executors import FailedLaunch, Launched, launch

if TYPE_CHECKING:
    from .runner import Ran


class LaunchFirst:
    """``launch_first`` and ``run_launched`` for ``Runner`` (see the module docstring)."""

    def launch_first(self, sequences: list, now: float, arrival_s: float) -> Launched | None:
        """Intake hold's launch first: a call's token ``sequences`` (checked; its SLAs not
        read yet, all arrived at ``arrival_s``) on the device at once, where the engine
        takes them as one batch from their lengths alone (``Engine.launches``): nothing
        else comes before the launch. None: nothing ran, decode the call whole. What ran
        goes on in ``run_launched``."""
        lengths = [len(s) for s in sequences]
        with self.cond:
            estimated_ms = None if self.stopping else self.engine.launches(now, lengths,
                                                                           arrival_s)
        if estimated_ms is None:
            return None
        launched_s = self._clock()
        try:
            flight = launch(self.executor, sequences)
        except Exception as exc:  # its members are answered as a failed batch's
            flight = FailedLaunch(exc)
        return Launched(flight, launched_s, estimated_ms)

    def run_launched(self, batch: list[QueuedRequest], now: float, launched: Launched,
                     complete: Callable[[], list[QueuedRequest]]) -> "Ran":
        """``launch_first``'s batch, beside the device: ``batch``, its members (their
        SLAs not read yet), bracketed as any batch from its launch on; right away
        ``complete`` decodes the rest, answers what ends at once and returns the members
        the batch serves, with their SLAs; the engine hears them (``took_whole``) before it
        hears the batch started."""
        from .runner import Ran  # the runner's own record of a step (it imports this)
        with self.cond:
            health = self.step_perception.read(now)[1]
            step = self.engine.launched_step(batch, launched.estimated_ms)
        self.log.zone_change(step.decision.zone, step.decision.mode,
                             self.scheduler.formers[step.decision.mode].name, now)
        started = self._run(step, now, complete=functools.partial(self._took, step, now,
                                                                  complete),
                            launched=launched)
        return Ran(now, step, self.arrivals, started, health, self.executor_s)

    def _took(self, step: Step, now: float,
              complete: Callable[[], list[QueuedRequest]]) -> list[QueuedRequest]:
        """``launch_first``'s batch is on the device: its members with their SLAs, told."""
        served = [q for q in complete() if not q.handle.answered]  # cancelled meanwhile
        with self.cond:
            self._hear_ended()  # before the engine's tick reads the device's busy time
            self.engine.took_whole(step, served, now)
            self.arrivals += len(served)
        return served
