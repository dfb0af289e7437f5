"""Throughput of parallel TCP streams of one site through the emulated link (vflflare/poc/wan_link.py), on
loopback: each stream sends its share of --mb and waits for the receiver's "ok". Writes nothing; prints one
JSON line. Runs against any checkout's relay (it only uses `WanLink(port, rtt_ms, mbit)` and `link.port`):

    PYTHONPATH=custom python scripts/relay_throughput.py --mb 50 --streams 2 --mbit 100 --rtt-ms 20
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time

from vflflare.poc.wan_link import WanLink


def sink() -> tuple[socket.socket, int]:
    """A receiver that answers each message "<n>\\n" + n bytes with b"ok"."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as stream:
            for header in iter(stream.readline, b""):
                left = int(header)
                while left:
                    left -= len(stream.read(min(left, 1 << 20)))
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


def measure(mb: float, streams: int, mbit: float, rtt_ms: float) -> dict:
    listener, port = sink()
    each = int(mb * 1e6 / streams)
    ends: list[float] = []
    with WanLink(port, rtt_ms=rtt_ms, mbit=mbit) as link:
        conns = [socket.create_connection(("127.0.0.1", link.port)) for _ in range(streams)]

        def send(conn: socket.socket) -> None:
            conn.sendall(f"{each}\n".encode() + b"x" * each)
            assert conn.recv(2) == b"ok"
            ends.append(time.perf_counter())

        start = time.perf_counter()
        threads = [threading.Thread(target=send, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for conn in conns:
            conn.close()
    listener.close()
    wall = max(ends) - start
    return {
        "mb": mb,
        "streams": streams,
        "mbit": mbit,
        "rtt_ms": rtt_ms,
        "wall_s": round(wall, 3),
        "first_stream_done_s": round(min(ends) - start, 3),
        "throughput_mbit": round(mb * 8 / wall, 1),
        "per_site_bound_s": round(mb * 8 / mbit + rtt_ms / 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=50.0, help="MB sent in all, split evenly over the streams")
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--mbit", type=float, default=100.0)
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.reps):
        print(json.dumps(measure(args.mb, args.streams, args.mbit, args.rtt_ms)), flush=True)


if __name__ == "__main__":
    main()
