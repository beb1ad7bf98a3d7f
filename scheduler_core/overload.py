"""The late share and the sustained-overload state it drives (no clock of its own).

``late_share`` is the smoothed share of each hand-over that the estimate calls late, with
the requests whose client timeout passed in Triton's queue counted as late too. It is
measured once per hand-over, at the first decision after arrivals, so a call counts once
and not again as its queue drains. It decides two things (``ControlConfig``):

* whether a request late from waiting is refused (``refusing_late``: from
  ``refusal_late_share``); one late even alone and at once is refused always;
* the sustained overload (``overloaded``): entered when the share reaches
  ``overload_late_share``, or at once when one intake-hold call overruns its budget
  refusing ``overload_exit_late_share`` or more of it (``call_overran``); left when the
  share falls below ``overload_exit_late_share``.
"""

from __future__ import annotations

import math

from .profile import ControlConfig


class OverloadState:
    """One scheduler's late share and overload state (see the module docstring)."""

    def __init__(self, control: ControlConfig, start_s: float = 0.0):
        self.control = control
        self.late_share = 0.0
        self.overloaded = False
        self._at_s = start_s  # when late_share last moved
        self._arrived = False  # a request was queued since the share was measured
        self._expired = 0  # hand_over_expired's requests, for the next measurement

    def arrived(self) -> None:
        """Requests were queued: the next decision measures the share."""
        self._arrived = True

    def measure(self, now_s: float, late: int, queued: int) -> None:
        """Smooth ``late`` (of the ``queued`` requests, by the estimate, now; with the
        hand-over's expired ones) into ``late_share``, once per hand-over."""
        if not self._arrived:
            return
        self._arrived = False
        late, queued, self._expired = late + self._expired, queued + self._expired, 0
        self._smooth(now_s, late / queued)

    def hand_over_expired(self, now_s: float, count: int, queued: int) -> None:
        """``count`` requests of a hand-over refused because their client timeout passed in
        Triton's queue: demand that came too late, late in that hand-over's measurement
        (at once where none of the hand-over was queued, ``queued`` 0). Uncounted, a
        timeout shorter than the SLA hides the overload until the calls run long."""
        if count <= 0:
            return
        self._expired += count
        self._arrived = True
        if not queued:
            self.measure(now_s, 0, 0)

    def refused(self, now_s: float, refused: int, call_size: int) -> None:
        """A budgeted call refused ``refused`` of the ``call_size`` it came with: that
        share counts as late, demand the device did not carry. A call that refuses little
        (a short clump) moves the share little, so the state ends once the load falls."""
        if refused and call_size:
            self._smooth(now_s, min(1.0, refused / call_size))

    def call_overran(self, refused: int, handled: int) -> None:
        """Intake hold: a call ran past its overload budget and refused ``refused`` of the
        ``handled`` requests it decided so far. At overload_exit_late_share or more the
        call is an overload on its own: the state is entered at once, held at that share.
        What arrives during a call waits unseen in Triton's queue until it returns; at an
        onset the smoothed share moves a call too late (docs/reliability.md, the
        overload's onset)."""
        share = refused / handled if handled else 0.0
        ctl = self.control
        if not self.overloaded and share >= min(ctl.overload_exit_late_share,
                                                ctl.overload_late_share):
            self.overloaded = True
            self.late_share = max(self.late_share, share)

    def refusing_late(self) -> bool:
        """Whether a request late from waiting is refused now."""
        share = self.control.refusal_late_share
        return share <= 0 or self.late_share >= share

    def _smooth(self, now_s: float, share: float) -> None:
        """Move ``late_share`` towards ``share`` (exponentially, over refusal_window_ms)
        and update the overload state."""
        dt = max(0.0, now_s - self._at_s)
        self._at_s = now_s
        weight = 1.0 - math.exp(-dt * 1000.0 / self.control.refusal_window_ms)
        self.late_share += weight * (share - self.late_share)
        ctl = self.control
        if self.late_share >= ctl.overload_late_share:
            self.overloaded = True
        elif self.late_share < min(ctl.overload_exit_late_share, ctl.overload_late_share):
            self.overloaded = False
