"""The hostile-reload case: configs that name files outside the repository, oversized
profiles and bad values are refused, naming the problem, without leaking content.
"""

from __future__ import annotations

import json
import os
import time

from server_ops.launcher import TritonServer
from .fixtures import (CaseResult, Context, fmt, HOSTILE, HOSTILE_PROFILE_MB,
                       HOSTILE_REFUSAL_BOUND_S, HOSTILE_SECRET, load_average, missed_time_bound,
                       prepare_hostile, Tally)
from .servers import (OWN_SERVER_EXIT_TIMEOUT_S, ServerStop, http_client, http_ready, infer_error,
                      health_after)


HOSTILE_RELOADS = (  # (label, config parameters, expected in the refusal)
    ("profile_dir symlinked out of the repository", {"profile_dir": f"{HOSTILE}/linked_out"},
     "resolves outside the model repository"),
    ("profile symlinked to /etc/passwd", {"profile_dir": f"{HOSTILE}/passwd_profiles"},
     "passwd.yaml: resolves outside"),
    (f"{HOSTILE_PROFILE_MB} MB profile", {"profile_dir": f"{HOSTILE}/huge_profiles"},
     "byte limit for a profile file"),
    ("missing inner_model", {"inner_model": "does_not_exist"},
     "inner_model='does_not_exist'"),
)


# Triton 2.51 keeps the version of a refused reload counted as a live model until it exits:
# a server that refused a reload waits its whole exit timeout at shutdown ("Found 1 live
# models"), for any Python model (reproduced with a model whose initialize() raises; a
# refused first load does not do it). So the hostile reloads run on a server of their own,
# with a short exit timeout, and its stop row says so.
REFUSED_RELOAD_STOP = ("Triton 2.51 counts a refused reload's version as live until exit, "
                       "so this server waits its exit timeout (docs/reliability.md, Stub crashes and "
                       "stalls)")


def case_hostile(ctx: Context) -> CaseResult:
    """A live model reloaded with hostile profiles: each reload refused within 2 s, quoting
    nothing from outside the repository, the old version still serving. On a server of its
    own (see REFUSED_RELOAD_STOP); its stop is a row of its own."""
    repo = os.path.join(ctx.tmp, "hostile_repository")
    os.makedirs(repo)
    outside = prepare_hostile(repo, ctx.tmp)
    log = os.path.join(ctx.tmp, "hostile-tritonserver.log")
    server = TritonServer(repo, log_path=log, exit_timeout_s=OWN_SERVER_EXIT_TIMEOUT_S,
                          extra_args=("--model-control-mode=explicit",
                                      f"--load-model={HOSTILE}"))
    stops: list[CaseResult] = []
    with ServerStop(server, "server stop (hostile reloads)", stops,
                    expected=REFUSED_RELOAD_STOP):
        case = run_hostile(ctx, server, outside)
    ctx.extra_rows.extend(stops)
    return case


def _log_clock_s(line: str) -> float | None:
    """Seconds of the day of a tritonserver log line ("I1201 09:43:01.070325 ...")."""
    try:
        h, m, s = line.split()[1].split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)
    except (IndexError, ValueError):
        return None


def plugin_refusal_s(log_path: str, offset: int, model: str) -> float | None:
    """From the server log past byte ``offset``: seconds from Triton handing the new
    version's instance to the Python backend (``ModelInstanceInitialize``) to the load's
    failure - the plugin's share of a refused load; before it, Triton starts stubs."""
    with open(log_path, "rb") as fh:
        fh.seek(offset)
        lines = fh.read().decode("utf-8", "replace").splitlines()
    begin = next((_log_clock_s(x) for x in lines
                  if f"ModelInstanceInitialize: {model}_" in x), None)
    end = next((_log_clock_s(x) for x in lines if f"failed to load '{model}'" in x), None)
    return None if begin is None or end is None else (end - begin) % 86400.0


def run_hostile(ctx: Context, server: TritonServer, outside: str) -> CaseResult:
    from tritonclient.utils import InferenceServerException

    case = CaseResult("hostile reloads", None, tally=Tally())
    tally, notes, fails = case.tally, case.notes, case.failures
    notes.append(f"{HOSTILE} on a server of its own; calls: each hostile reload (an error "
                 f"is the expected answer) and one inference after it")
    client = http_client(server, 30.0)
    try:
        for label, params, expected in HOSTILE_RELOADS:
            config = client.get_model_config(HOSTILE)
            for key, value in params.items():
                config.setdefault("parameters", {})[key] = {"string_value": value}
            started = time.monotonic()
            log_offset = os.path.getsize(server.log_path)
            message = ""
            try:
                client.load_model(HOSTILE, config=json.dumps(config))
                tally.add("OK")
            except InferenceServerException as exc:
                message = str(exc)
                tally.add(f"load refused (HTTP {exc.status() or '?'})")
            except Exception as exc:  # no answer within the client's timeout
                message = f"{type(exc).__name__}: {exc}"
                tally.add(None)
            took = time.monotonic() - started
            plugin_s = plugin_refusal_s(server.log_path, log_offset, HOSTILE)
            checks = []
            if not message:
                fails.append(f"{label}: the reload was accepted")
            elif expected not in message:
                fails.append(f"{label}: refusal without {expected!r}: {message[:200]!r}")
            if plugin_s is None or plugin_s > HOSTILE_REFUSAL_BOUND_S:
                missed_time_bound(ctx, case, f"{label}: the plugin refused after "
                                  f"{fmt(plugin_s, 2)} s > {HOSTILE_REFUSAL_BOUND_S:g} s")
            quoted = [w for w in (outside, HOSTILE_SECRET, "root:") if w in message]
            if quoted or len(message) > 2000:
                fails.append(f"{label}: the refusal quotes outside content {quoted} "
                             f"({len(message)} chars)")
            else:
                checks.append("nothing from outside quoted")
            why = infer_error(server, HOSTILE)
            tally.add("OK" if why is None else "INFER_FAILED")
            if why is None and http_ready(server, HOSTILE):
                checks.append("old version serves")
            else:
                fails.append(f"{label}: the old version stopped serving ({why})")
            notes.append(f"{label}: refused in {took:.2f} s, of which the plugin "
                         f"{fmt(plugin_s, 2)} s (bound {HOSTILE_REFUSAL_BOUND_S:g} s; the rest "
                         f"is Triton starting the new version's stubs; load average "
                         f"{load_average()}), " + ", ".join(checks))
    finally:
        client.close()
        case.healthy = health_after(server, HOSTILE)
    return case
