"""Picking free TCP ports for a tritonserver the launcher starts, and telling a taken one."""

from __future__ import annotations

import random
import socket
from typing import Iterable


# Ports the launcher picks itself come from BELOW the kernel's ephemeral range: a port from
# the range (what binding port 0 returns) can be taken, between the pick and tritonserver's
# bind, by any client connection's local end. The range is read from here.
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_PICKED_PORT = 20000


def _ephemeral_low() -> int | None:
    try:
        with open(EPHEMERAL_RANGE_FILE) as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_ports(count: int = 3, exclude: Iterable[int] = (),
               rng: random.Random | None = None) -> list[int]:
    """``count`` distinct TCP ports that are free on all interfaces right now (tritonserver
    binds 0.0.0.0) and not in ``exclude``, picked at random below the ephemeral range when
    there is room there (else whatever the kernel gives for port 0). Free NOW: someone may
    still take one before the server binds it; ``TritonServer`` then starts again on new
    ones."""
    rng = rng or random.SystemRandom()
    low = _ephemeral_low()
    unwanted = set(exclude)
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        if low is not None and low - LOWEST_PICKED_PORT >= 100 * (count + len(unwanted)):
            for _ in range(50 * count):
                if len(ports) == count:
                    break
                port = rng.randrange(LOWEST_PICKED_PORT, low)
                if port in ports or port in unwanted:
                    continue
                s = socket.socket()
                try:
                    s.bind(("0.0.0.0", port))
                except OSError:
                    s.close()
                    continue
                sockets.append(s)
                ports.append(port)
        while len(ports) < count:  # no room below the range, or all we tried were taken
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
            sockets.append(s)  # held (closed below) even when unwanted: the next is another
            if s.getsockname()[1] not in unwanted:
                ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


class PortInUse(RuntimeError):
    """A port the server needs is taken."""


def port_in_use(port: int) -> bool:
    """Whether something accepts connections on ``port`` or it cannot be bound (tritonserver
    binds all interfaces)."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return True
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False
