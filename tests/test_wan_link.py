"""vflflare/poc/wan_link.py (poc/run.sh --link-*) adds the round-trip time and the bandwidth it is set to,
measured through it."""

from __future__ import annotations

import socket
import statistics
import threading
import time

import pytest

from vflflare.poc.wan_link import WanLink


def sink_server() -> tuple[socket.socket, int]:
    """A server that answers each message "<n>\\n" after reading n more bytes with b"ok"."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as stream:
            for header in iter(stream.readline, b""):
                stream.read(int(header))
                conn.sendall(b"ok")

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.getsockname()[1]


def round_trip(conn: socket.socket, nbytes: int) -> float:
    start = time.perf_counter()
    conn.sendall(f"{nbytes}\n".encode() + b"x" * nbytes)
    assert conn.recv(2) == b"ok"
    return time.perf_counter() - start


@pytest.fixture
def server_port():
    listener, port = sink_server()
    yield port
    listener.close()


def test_link_adds_the_round_trip_time(server_port):
    with socket.create_connection(("127.0.0.1", server_port)) as direct:
        lan = statistics.median(round_trip(direct, 10) for _ in range(10))
    with WanLink(server_port, rtt_ms=40) as link, socket.create_connection(("127.0.0.1", link.port)) as conn:
        wan = statistics.median(round_trip(conn, 10) for _ in range(10))
    assert 0.040 <= wan - lan <= 0.048, (lan, wan)
    assert link.stats.connections == 1 and link.stats.up == 10 * 13 and link.stats.down == 10 * 2


def test_link_passes_the_bandwidth(server_port):
    with WanLink(server_port, rtt_ms=10, mbit=8) as link, socket.create_connection(("127.0.0.1", link.port)) as conn:
        elapsed = round_trip(conn, 1_000_000)  # 8 Mbit at 8 Mbit/s: 1 s, plus the round trip
    assert 1.0 <= elapsed <= 1.1, elapsed
    assert link.stats.up == 1_000_000 + len(b"1000000\n")


def test_link_settings_are_checked():
    with pytest.raises(ValueError, match="rtt_ms >= 0 and mbit > 0"):
        WanLink(1, rtt_ms=-1)
