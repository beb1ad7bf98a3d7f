"""What a valid request's refusal must say: the model's own numbers, adding up."""

from __future__ import annotations

import re

import pytest

INFEASIBLE_NUMBERS = re.compile(r"deadline infeasible: .*\(estimated finish ([\d.]+) ms after "
                                r"arrival > SLA ([\d.]+) ms: .* x cost correction ([\d.]+)\)")


def refused_by_its_own_estimate(value: str, sla) -> bool:
    """A valid request may be refused, but only as infeasible by the model's own estimate:
    the refusal's numbers put the estimated finish past this request's SLA. (On a loaded
    CPU the estimate - the cost model times the correction learnt from batches that ran
    slow, which host contention slows for the EMULATED device too - can say so; the
    contract is that it says why, with numbers that add up.)"""
    numbers = INFEASIBLE_NUMBERS.search(value)
    if numbers is None:
        return False
    finish_ms, sla_ms, _ = map(float, numbers.groups())
    return finish_ms > sla_ms and (sla is None or sla_ms == pytest.approx(sla, abs=0.05))
