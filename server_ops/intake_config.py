"""The intake modes' ``config.pbtxt`` writers (see ``intake``): read and written as
Triton's own protobuf (``tritonclient``'s ``model_config_pb2``), the leading comment lines
of the text kept. Tests, scripts and operator tools use them to write deployments; the
server's stub never imports this module (its Python need not have ``tritonclient``).
"""

from __future__ import annotations

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

# Requests Triton hands over in one execute() call under intake hold. With no queue policy
# Triton's queue prefetches: the next payload grows while a call runs, and a call takes
# everything that arrived since the previous one started, so the plugin's arrival dates
# are bounded (hold_driver) and the backlog it cannot see is one call's arrivals. Chosen
# by measurement (scripts/hold_speed.py, results/hold_speed.md: flat GPU-like profile,
# perf_analyzer): 1024 held the closed loop at 64 in flight where 64 and 256 refused, and
# its calls stayed as short as theirs (a call ends when its feasible work is done).
HOLD_MAX_HAND_OVER = 1024
GATHER_MAX_HAND_OVER = 512
# Triton's queue bound in front of intake hold; 0 (the default): no default_queue_policy.
# Any policy (max_queue_size, default_timeout_microseconds, or allow_timeout_override)
# stops Triton 2.51's queue from prefetching, and then its batcher loses a wake-up now and
# then: ~500 ms gaps between execute() calls with work queued (docs/platform.md). The
# plugin enforces a client's timeout itself (hold_driver) and refuses under a sustained
# overload (control.refusal_late_share), which bound the backlog instead.
HOLD_MAX_QUEUE_SIZE = 0


def parse(config: str) -> mc.ModelConfig:
    """``config.pbtxt`` text as Triton's ``ModelConfig`` (raises on text that is not one)."""
    return text_format.Parse(config, mc.ModelConfig())


def render(model: mc.ModelConfig, like: str = "") -> str:
    """``model`` as config text, after the leading comment lines of ``like``."""
    header = []
    for line in like.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    body = text_format.MessageToString(model)
    return "\n".join(header) + ("\n" if header else "") + body


def intake_of(model: mc.ModelConfig) -> str:
    """The config's ``intake`` parameter ("" when it names none)."""
    return model.parameters["intake"].string_value if "intake" in model.parameters else ""


def _with_intake(model: mc.ModelConfig, intake: str) -> mc.ModelConfig:
    model.parameters["intake"].string_value = intake
    return model


def _batcher_in_front(model: mc.ModelConfig, max_hand_over: int, priority_levels: int
                      ) -> mc.ModelConfig:
    """Triton's dynamic batcher (delay 0) in front, ragged variable-length inputs, and
    ``max_batch_size`` as the hand-over bound (one sequence per request still).

    ``priority_levels`` > 0 maps Triton's request ``priority`` onto the hand-over: Triton's
    queue then hands higher priorities (1 is the highest) over first, requests without one
    at the lowest level. (The Python backend of Triton 24.10 gives a Python model no
    access to a request's priority, so this queue is the only place it can act; with
    ``intake: release`` nothing waits in Triton's queue and priority has no effect.)"""
    model.max_batch_size = max_hand_over
    for tensor in model.input:
        if -1 in tensor.dims:
            tensor.allow_ragged_batch = True
    batcher = model.dynamic_batching
    batcher.max_queue_delay_microseconds = 0
    # Triton refuses a preferred size above max_batch_size; its auto-complete writes
    # [max_batch_size] into a config it serves back, so a smaller hand-over drops it.
    kept = [size for size in batcher.preferred_batch_size if size <= max_hand_over]
    del batcher.preferred_batch_size[:]
    batcher.preferred_batch_size.extend(kept)
    batcher.priority_levels = priority_levels
    batcher.default_priority_level = priority_levels
    return model


def hold_config(config: str, max_hand_over: int = HOLD_MAX_HAND_OVER,
                priority_levels: int = 0, max_queue_size: int = HOLD_MAX_QUEUE_SIZE) -> str:
    """A model's ``config.pbtxt`` text switched to ``intake: hold``: Triton's batcher in
    front (see ``_batcher_in_front``). ``max_queue_size`` > 0 bounds Triton's queue to that
    many waiting requests (past it Triton refuses at once, UNAVAILABLE; a client's
    ``timeout`` honoured there) at the cost HOLD_MAX_QUEUE_SIZE describes; 0: no policy."""
    return render(_hold(parse(config), max_hand_over, priority_levels, max_queue_size), config)


def hold_config_json(config: dict, max_hand_over: int = HOLD_MAX_HAND_OVER) -> dict:
    """``config`` in Triton's JSON form switched to ``intake: hold`` with a hand-over of
    ``max_hand_over`` requests, as ``hold_config`` switches a ``config.pbtxt``."""
    model = json_format.ParseDict(config, mc.ModelConfig(), ignore_unknown_fields=True)
    return json_format.MessageToDict(_hold(model, max_hand_over, 0, HOLD_MAX_QUEUE_SIZE),
                                     preserving_proto_field_name=True)


def _hold(model: mc.ModelConfig, max_hand_over: int, priority_levels: int,
          max_queue_size: int) -> mc.ModelConfig:
    model = _batcher_in_front(model, max_hand_over, priority_levels)
    model.dynamic_batching.ClearField("default_queue_policy")
    if max_queue_size > 0:
        policy = model.dynamic_batching.default_queue_policy
        policy.timeout_action = mc.ModelQueuePolicy.REJECT
        policy.allow_timeout_override = True
        policy.max_queue_size = max_queue_size
    return _with_intake(model, "hold")


def _gather(model: mc.ModelConfig, max_hand_over: int, priority_levels: int
            ) -> mc.ModelConfig:
    model = _batcher_in_front(model, max_hand_over, priority_levels)
    model.dynamic_batching.ClearField("default_queue_policy")
    return _with_intake(model, "gather")


def gather_config(config: str, max_hand_over: int = GATHER_MAX_HAND_OVER,
                  priority_levels: int = 0) -> str:
    """``config`` switched to ``intake: gather`` (the front is ``hold``'s, Triton's queue
    unbounded: the plugin sees what it holds)."""
    return render(_gather(parse(config), max_hand_over, priority_levels), config)


def gather_config_json(config: dict, max_hand_over: int = GATHER_MAX_HAND_OVER) -> dict:
    """``config`` in Triton's JSON form (what its model-config and model-load APIs carry)
    switched to ``intake: gather``, as ``gather_config`` switches a ``config.pbtxt``."""
    model = json_format.ParseDict(config, mc.ModelConfig(), ignore_unknown_fields=True)
    return json_format.MessageToDict(_gather(model, max_hand_over, 0),
                                     preserving_proto_field_name=True)


def release_config(config: str) -> str:
    """``config`` switched to ``intake: release``: no Triton batcher in front
    (``max_batch_size: 1``, no ``dynamic_batching``), one request per ``execute()``."""
    model = parse(config)
    model.ClearField("dynamic_batching")
    model.max_batch_size = 1
    for tensor in model.input:
        tensor.allow_ragged_batch = False
    return render(_with_intake(model, "release"), config)
