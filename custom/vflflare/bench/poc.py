"""What the suites that run a real POC share: the repository's poc/run.sh and a free port for each start."""

from __future__ import annotations

import socket

from vflflare.bench.paths import REPO

POC_RUN = REPO / "poc" / "run.sh"


def free_port() -> int:
    """A TCP port that is free on localhost right now (a stopped POC's port can stay busy a while)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
