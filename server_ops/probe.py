"""A liveness probe for one explicit-batching model: is its Python stub alive and answering?

Triton 2.51 keeps a model whose stub died READY: ``/v2/models/<m>/ready`` and
``/v2/health/*`` answer 200 while every request fails "Stub process ... is not healthy".
So the probe asks the model itself: it sends one request that the plugin refuses at once
without touching the device (an empty ``INPUT_IDS``: INVALID_ARG from its decode). Any
answer from the plugin, that refusal included, proves the stub alive and its ``execute()``
calls returning; no answer within the timeout (a hung stub, a full queue behind a hung
batch), a "not healthy" error, or no server is a failure.

    python -m server_ops.probe --url 127.0.0.1:8000 --model my_encoder_explicit

Exit 0: alive; 1: the model failed the probe (the reason on stderr); 2: bad arguments.
``deploy/kubernetes/base/deployment.yaml`` runs it as the liveness probe (an exec probe in
the tritonserver container, which has the project's ``server`` extra installed).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

DEFAULT_TIMEOUT_S = 5.0
# What Triton 2.51's Python backend answers for a model whose stub is gone.
DEAD_STUB = "not healthy"


def probe(url: str, model: str, timeout_s: float = DEFAULT_TIMEOUT_S,
          input_name: str = "INPUT_IDS") -> str | None:
    """None when ``model`` answered; else why it failed."""
    body = json.dumps({"inputs": [{"name": input_name, "shape": [1, 0], "datatype": "INT64",
                                   "data": []}]}).encode()
    request = urllib.request.Request(f"http://{url}/v2/models/{model}/infer", data=body,
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as resp:
            answer = resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:  # the plugin's refusal arrives as 400
        answer = exc.read().decode("utf-8", errors="replace")
    except (OSError, ValueError) as exc:  # no server, no answer in time
        return f"no answer from {model} within {timeout_s:g} s ({type(exc).__name__}: {exc})"
    if DEAD_STUB in answer:
        return f"{model}'s Python stub is gone: {answer[:200]}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8000", help="the server's HTTP host:port")
    parser.add_argument("--model", required=True)
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--input", default="INPUT_IDS",
                        help="an INT64 input of the model, sent empty (default: %(default)s)")
    args = parser.parse_args(argv)
    failure = probe(args.url, args.model, args.timeout_s, args.input)
    if failure is not None:
        print(f"probe: {failure}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
