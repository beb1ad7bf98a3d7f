"""Intake hold's launch first, for ``runner.Runner`` (a base, as ``scheduler_core``'s
as-handed rule is ``Scheduler``'s): a call's batch goes to the device as soon as its
token sequences are read and checked, where the engine takes the call whole from its
lengths alone (``Engine.launches``); its members, the rest of its decoding, the engine's
step and its counts come beside the device (``run_launched``). ``HoldDriver`` drives it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

from scheduler_core.engine import AS_HANDED, Step
from scheduler_core.request import QueuedRequest, Served

from .answers import Ticket, answer_all, embedding_responses, embedding_slots
from .executors import FailedLaunch, Launched, launch
from .metric_catalog import SIDECAR_DISABLED


@dataclass(frozen=True)
class Ran:
    """What one ``Runner.step`` did: its time, the engine's step, the arrivals counted
    when it was taken, when its batch started (None: no batch), the sidecar's health it
    perceived (for the metric), and its batch's run on the executor (s; 0 where none ran:
    the timeline's device share)."""

    now_s: float
    step: Step
    arrivals_seen: int
    started_s: float | None
    sidecar_health: float = SIDECAR_DISABLED
    executor_s: float = 0.0


class LaunchFirst:
    """``launch_first`` and ``run_launched`` for ``Runner`` (see the module docstring)."""

    def launch_first(self, sequences: list, now: float, arrival_s: float) -> Launched | None:
        """Intake hold's launch first: a call's token ``sequences`` (checked; its SLAs not
        read yet, all arrived at ``arrival_s``) on the device at once, where the engine
        takes them as one batch from their lengths alone (``Engine.launches``): nothing
        else comes before the launch. None: nothing ran, decode the call whole. What ran
        goes on in ``run_launched``."""
        lengths = list(map(len, sequences))
        with self.cond:
            # The test hook's fault fires in a batch's step: its calls take that path.
            estimated_ms = (None if self.stopping or self._loop_fault_token
                            else self.engine.launches(now, lengths, arrival_s))
        if estimated_ms is None:
            return None
        launched_s = self._clock()
        try:
            flight = launch(self.executor, sequences)
        except Exception as exc:  # its members are answered as a failed batch's
            flight = FailedLaunch(exc)
        return Launched(flight, launched_s, estimated_ms)

    def run_launched(self, tickets: Sequence[Ticket], now: float, launched: Launched,
                     complete: Callable[[], list[QueuedRequest]]) -> Ran | None:
        """``launch_first``'s batch, beside the device, in one pass: ``complete`` decodes
        the call's requests (``tickets``, in the batch's order), answers what ends at once
        and returns the members the batch serves, with their SLAs; the engine hears them
        taken and started (``Engine.took_launched``, one entry); the device's rows answer
        the tickets by position (one answered already keeps its answer); the engine hears
        the end at its next entry and the rest of the feedback while a later batch runs
        (``Deferred``), as any batch's (``Runner._run_batch``). None: it failed before
        the engine heard it (every request answered INTERNAL)."""
        started, served, step, began, ok = launched.launched_s, [], None, False, False
        health = self.step_perception.read(now)[1]
        self.executor_s, self._device_free_s = 0.0, None
        try:
            # Those answered since they were decoded (a timeout the guard enforced) left.
            served = complete()
            for member in served:  # a loop: a generator is one more code object a call loads
                if member.handle.answered:
                    served = [q for q in served if not q.handle.answered]
                    break
            with self.cond:
                self._hear_ended()  # before the engine's tick reads the device's busy time
                step = self.engine.launched_step(served, launched.estimated_ms)
                self.engine.took_launched(step, now, started)
                self.arrivals += len(served)
            began = True
            self.log.zone_change(step.decision.zone, step.decision.mode,
                                 self.scheduler.formers[step.decision.mode].name, now)
            running = self.watchdog.watch(served, started, launched.estimated_ms)
            self.deferred.run_due(now)  # earlier batches' feedback, while this one runs
            ok = self._answer_launched(tickets, launched, running)
        except Exception:  # its requests are answered below (INTERNAL); the driver goes on
            self.step_failed()
        finally:
            self.watchdog.clear()
        if not ok:  # what the failure left unanswered (where ok, every ticket is answered)
            self.answers.refuse([t for t in tickets if not t.answered], "step_failed",
                                "scheduler loop failed while handling this request")
        if began:
            self._batch_over(served, AS_HANDED, started, ok)
        return None if step is None else Ran(now, step, self.arrivals, started, health,
                                             self.executor_s)

    def _answer_launched(self, tickets: Sequence[Ticket], launched: Launched,
                         running) -> bool:
        """The launched batch's result, row i answering ``tickets[i]``; False where it
        failed (its requests refused) or the watchdog answered it (the rows dropped)."""
        rows = None
        try:
            slots = embedding_slots(self.executor, len(tickets))  # while the device runs
            rows = np.asarray(launched.flight.result())
            self._executor_ran(launched.flight, launched.launched_s)
        except Exception as exc:  # fail this batch's requests, keep the driver going
            self._batch_failed([t for t in tickets if not t.answered], exc)
        self.watchdog.clear()  # as in ``Runner._run_batch``: the watchdog is done with it
        if running.hung:  # the watchdog answered its requests; the late rows are dropped
            self._hung_returned(launched.launched_s)
            return False
        if rows is None:
            self.metrics.on_event("batch_failures_total")
            return False
        # row i as [1, dim]
        answer_all(tickets, slots.responses(rows) if slots else embedding_responses(rows))
        return True

    # -- a batch's end, for both paths (``Runner._run_batch``'s too) --------------------
    def _executor_ran(self, flight, launched_s: float) -> None:
        """The batch's run on the executor (``Ran.executor_s``): where the wait returned
        (as native's run is timed), else the flight's own span; and where the device went
        free (``_batch_over``)."""
        self.executor_s = self._clock() - launched_s if flight.waited else flight.device_s
        self._device_free_s = launched_s + self.executor_s

    def _batch_failed(self, tickets: Sequence[Ticket], exc: Exception) -> None:
        """The executor raised: the batch's requests (``tickets``, unanswered) refused,
        the failure logged."""
        pb_utils.Logger.log_error(f"{self.model_name}: batch of {len(tickets)} failed: {exc}")
        self.answers.refuse(tickets, "batch_failed", f"inference failed: {exc}")

    def _hung_returned(self, started_s: float) -> None:
        pb_utils.Logger.log_warn(
            f"{self.model_name}: the batch the watchdog failed returned after "
            f"{self._clock() - started_s:.1f} s; serving again")

    def _batch_over(self, members: Sequence[QueuedRequest], former: str, started: float,
                    ok: bool) -> None:
        """The bracket's end of a batch the engine heard started (``members``): one that
        succeeded is heard ended at the engine's next entry (``_hear_ended``) and observed
        while a later batch runs (``Deferred``); any other finished at once, not ok.

        The engine hears the end where the device went free (``_executor_ran``), not
        where the host finished answering: its busy share is the utilisation the zones
        read, and the host's answers after the device's end are not the device's load
        (NVML's utilisation, where the sidecar has it, counts kernels alone too). Its
        members' latencies end at ``done``, when their answers were built."""
        if ok:
            done = self._clock()
            free_s = self._device_free_s
            self._ended_s = done if free_s is None else min(free_s, done)
            self.deferred.add(functools.partial(self._observe, Served.of(members), former,
                                                started, done), done)
            return
        self.metrics.on_batch([r.seq_len for r in members], former)
        self._finished(members, started, ok=False)
