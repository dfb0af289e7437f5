"""An emulated wide-area link between a POC's sites and its server, on one machine.

This machine's kernel has no `netem`, so delay cannot come from `tc`. Instead the sites dial this TCP
relay, which forwards every byte to the server's port and back, and per connection and direction:
- passes at most `mbit` Mbit/s: a chunk leaves the sender's side when the link has serialised it
  (a router's queue in front of the line, never dropping), and
- delivers it half the round-trip time after that.
A request and its reply therefore take at least `rtt_ms` plus their size over the bandwidth, and a
connection's bytes stay in order. `tests/test_wan_link.py` measures both.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field

CHUNK = 64 * 1024


@dataclass
class LinkStats:
    """Bytes through the link, site->server ("up") and server->site ("down"), and connections made."""

    up: int = 0
    down: int = 0
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, direction: str, nbytes: int) -> None:
        with self.lock:
            setattr(self, direction, getattr(self, direction) + nbytes)


class WanLink:
    """A relay from a free localhost port to `target_port`, in its own thread and event loop:
    `with WanLink(8002, rtt_ms=20, mbit=100) as link: ... link.port ...`."""

    def __init__(
        self, target_port: int, rtt_ms: float = 0.0, mbit: float | None = None, target_host: str = "127.0.0.1"
    ) -> None:
        if rtt_ms < 0 or (mbit is not None and mbit <= 0):
            raise ValueError(f"a link needs rtt_ms >= 0 and mbit > 0, got rtt_ms={rtt_ms}, mbit={mbit}")
        self.target = (target_host, target_port)
        self.one_way_s = rtt_ms / 2000.0
        self.bytes_per_s = mbit * 1e6 / 8 if mbit else None
        self.stats = LinkStats()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="wan-link", daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def __enter__(self) -> WanLink:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> int:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connect, "127.0.0.1", 0, family=socket.AF_INET), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def stop(self) -> None:
        async def close_all() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    async def _connect(self, site_reader: asyncio.StreamReader, site_writer: asyncio.StreamWriter) -> None:
        self.stats.add("connections", 1)
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            site_writer.close()
            return
        await asyncio.gather(
            self._carry(site_reader, server_writer, "up"),
            self._carry(server_reader, site_writer, "down"),
            return_exceptions=True,
        )

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        """One direction of one connection: serialise at the bandwidth, then delay by the one-way time."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()
                self.stats.add(direction, len(chunk))

        delivering = asyncio.ensure_future(deliver())
        line_free = 0.0
        try:
            while chunk := await reader.read(CHUNK):
                now = loop.time()
                line_free = max(now, line_free) + (len(chunk) / self.bytes_per_s if self.bytes_per_s else 0.0)
                queue.put_nowait((line_free + self.one_way_s, chunk))
        except (ConnectionError, OSError):
            pass
        finally:
            queue.put_nowait((0.0, b""))
            try:
                await delivering
            except (ConnectionError, OSError):
                pass
            writer.close()
