"""A race in NVFlare 2.9's simulator, closed for the jobs vflflare runs in it.

The simulator starts each site's worker process from a thread of its own (SimulatorClientRunner.do_one_task)
and tells the worker which site it is through one dict that all the threads share: it writes
`build_ctx["client_name"]` once its worker answers, then sends the dict. Two threads whose workers answer
at the same moment can both send the second name, and one site then runs as the other. Seen here: the
server handed site-1's tasks to a process that called itself site-2, site-1's data was never read, and
the job failed in setup (`KeyError: 'label'` with the labels at site-1) or a liveness probe found site-2's
second cell missing.

`serialise_client_starts()` makes each thread hold a lock from the moment its worker answers until it has
sent that dict, so the name a worker gets is the one its thread wrote. Nothing else changes.
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_GIVE_UP_S = 120.0  # a thread that fails between the two steps must not hold the others forever


class _ReleasedOnFirstSend:
    """The worker connection, which releases the lock once the first message (the site's name) is sent."""

    def __init__(self, conn: Any) -> None:
        self._conn, self._held = conn, True
        self._timer = threading.Timer(_GIVE_UP_S, self._release)
        self._timer.daemon = True
        self._timer.start()

    def _release(self) -> None:
        if self._held:
            self._held = False
            self._timer.cancel()
            _LOCK.release()

    def send(self, obj: Any) -> None:
        try:
            self._conn.send(obj)
        finally:
            self._release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def serialise_client_starts() -> None:
    """Patch SimulatorClientRunner once (idempotent)."""
    from nvflare.private.fed.app.simulator.simulator_runner import SimulatorClientRunner

    if getattr(SimulatorClientRunner, "_vflflare_serialised", False):
        return
    connect = SimulatorClientRunner._create_connection

    def create_connection(self, open_port, timeout=60.0):  # noqa: ANN001, ANN202 - NVFlare's signature
        conn = connect(self, open_port, timeout=timeout)
        _LOCK.acquire()
        return _ReleasedOnFirstSend(conn)

    SimulatorClientRunner._create_connection = create_connection
    SimulatorClientRunner._vflflare_serialised = True
