"""The CLI's exit codes, one meaning each, so that a script or a CI job can tell a finding
from an outage: 0 ok, 1 a finding (drift, a missed target, a failed run) or an error the
command explains, 2 a usage error (click's own), 3 the server cannot be reached.

"Cannot be reached" is decided from the exception, never from its text alone: a refused or
reset connection, a timeout, a name that does not resolve (each as itself, or wrapped by
urllib), and gRPC's ``UNAVAILABLE`` when it says it could not connect (the plugin's own
"deadline infeasible" refusal is also ``UNAVAILABLE``, so the status alone is not enough).
"""

from __future__ import annotations

import socket
from typing import Any

import click

OK, FINDING, USAGE, UNREACHABLE = 0, 1, 2, 3

EPILOG = ("Exit codes: 0 ok; 1 a finding (drift, a missed target, a failed run) or an error "
          "the command explains; 2 usage (a bad or missing option); 3 the server cannot be "
          "reached (connection refused, timeout, unknown host).")

# gRPC's words for "no connection" (tritonclient.grpc raises them as UNAVAILABLE).
_GRPC_NO_CONNECTION = ("failed to connect", "dns resolution failed", "connection refused",
                       "name resolution")


class Unreachable(click.ClickException):
    """The server (or its metrics page) did not answer at all: exit 3."""

    exit_code = UNREACHABLE


def is_unreachable(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what it wraps) says no connection was made or kept: refused,
    reset, timed out, host unknown or unreachable."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror, socket.herror)):
            return True
        if _grpc_no_connection(exc):
            return True
        reason = getattr(exc, "reason", None)  # urllib.error.URLError wraps the socket error
        if isinstance(reason, BaseException) and is_unreachable(reason):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _grpc_no_connection(exc: BaseException) -> bool:
    status: Any = getattr(exc, "status", None)
    if type(exc).__name__ != "InferenceServerException" or not callable(status):
        return False
    text = str(getattr(exc, "message", lambda: "")() or exc).lower()
    return "UNAVAILABLE" in str(status()) and any(w in text for w in _GRPC_NO_CONNECTION)


def unreachable(what: str, exc: BaseException) -> Unreachable:
    """The one-line error for exit 3: what could not be reached, and why."""
    reason = getattr(exc, "reason", None)
    why = reason if isinstance(reason, BaseException) else exc
    detail = str(why).strip().splitlines()[0] if str(why).strip() else type(why).__name__
    return Unreachable(f"cannot reach {what}: {detail}")


def check_reached(series: Any, what: str) -> None:
    """Raise :class:`Unreachable` when a sampled series (``live.Series``) read nothing and
    its last failure was "cannot reach" (a bad or empty page stays the command's own error)."""
    if not series.snapshots and is_unreachable(getattr(series, "last_exception", None)):
        raise unreachable(what, series.last_exception)


# The options that name a server, in the order the message prefers them.
_ENDPOINT_OPTIONS = ("--url", "--metrics-url")


class ExitCodeGroup(click.Group):
    """A group whose commands exit 3 when the server cannot be reached, wherever in the
    command the connection failed: an exception that says so, or a click error (exit 1)
    raised while handling one. Usage errors keep click's 2."""

    def invoke(self, ctx: click.Context) -> Any:
        endpoint = endpoint_named([*getattr(ctx, "_protected_args", []), *ctx.args])
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, Unreachable):
            raise
        except click.ClickException as exc:
            if exc.exit_code == FINDING and is_unreachable(exc.__cause__ or exc.__context__):
                message = exc.format_message()
                if not message.startswith("cannot reach"):
                    message = f"cannot reach {endpoint}: {message}"
                raise Unreachable(message) from None
            raise
        except Exception as exc:
            if is_unreachable(exc):
                raise unreachable(endpoint, exc) from None
            raise


def endpoint_named(args: list[str]) -> str:
    """The server the command line names (``--url X``, ``--metrics-url=X``), for the
    message; "the server" when it names none."""
    for option in _ENDPOINT_OPTIONS:
        for i, arg in enumerate(args):
            if arg == option and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(option + "="):
                return arg.split("=", 1)[1]
    return "the server"
