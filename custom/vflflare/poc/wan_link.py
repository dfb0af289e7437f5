"""An emulated wide-area link between a POC's sites and its server, on one machine.

This machine's kernel has no `netem`, so delay cannot come from `tc`. Instead the sites dial this TCP
relay, which forwards every byte to the server's port and back. Each site has a port of its own on the
relay and, per direction, a line of its own that every connection of that site shares (NVFlare opens
more than one connection per site; a site gets `mbit` in all, not per connection):
- the line passes at most `mbit` Mbit/s: a chunk leaves the sender's side when the line has serialised
  it (a router's queue in front of the line, never dropping), the site's connections taking turns
  chunk by chunk (TCP flows sharing a bottleneck get about equal shares), and
- each chunk arrives half the round-trip time after that, plus, when asked:
  - jitter: a per-chunk variation of that one-way delay (`jitter_ms`: uniform in +-jitter_ms, or normal with
    that standard deviation), never reordering a connection's bytes (a chunk waits for the one before it);
  - loss: each TCP segment (`MSS` bytes) is lost with probability `loss`; the relay sits on TCP, so no byte
    is dropped: a chunk that lost a segment arrives `loss_penalty_ms` later (default one round trip, what
    fast retransmit costs; 200 ms and more emulates a retransmission timeout), and the connection's later
    bytes wait behind it. The congestion window's reaction (a lower rate after a loss) is not emulated.
A request and its reply therefore take at least `rtt_ms` plus their size over the bandwidth, and a
connection's bytes stay in order. Jitter and loss are off by default. `tests/test_wan_link.py` measures it.
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
import threading
from collections import deque
from dataclasses import dataclass, field

CHUNK = 64 * 1024
MSS = 1448  # a TCP segment's payload on Ethernet with timestamps
READ_AHEAD = 4 * 1024 * 1024  # bytes a connection may have waiting for its line before the relay stops reading it
JITTER = ("uniform", "normal")


@dataclass
class LinkStats:
    """Bytes through the link, site->server ("up") and server->site ("down"), connections made, and the
    chunks that lost a segment."""

    up: int = 0
    down: int = 0
    connections: int = 0
    lost_chunks: int = 0
    lost_segments: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, direction: str, nbytes: int) -> None:
        with self.lock:
            setattr(self, direction, getattr(self, direction) + nbytes)

    def as_dict(self) -> dict[str, int]:
        return {"up_bytes": self.up, "down_bytes": self.down, "connections": self.connections}


@dataclass(frozen=True)
class Impairment:
    """What a chunk meets besides the bandwidth and the round trip: jitter and loss (both off by default)."""

    one_way_s: float = 0.0
    jitter_ms: float = 0.0
    jitter: str = "uniform"
    loss: float = 0.0
    loss_penalty_ms: float | None = None  # None: one round trip

    def __post_init__(self) -> None:
        if self.jitter_ms < 0 or self.jitter not in JITTER:
            raise ValueError(f"a link needs jitter_ms >= 0 and jitter in {JITTER}, got {self.jitter_ms}, {self.jitter}")
        if not 0 <= self.loss < 1 or (self.loss_penalty_ms is not None and self.loss_penalty_ms < 0):
            raise ValueError(
                f"a link needs 0 <= loss < 1 and loss_penalty_ms >= 0, got {self.loss}, {self.loss_penalty_ms}"
            )
        if self.loss and self.penalty_s == 0:
            raise ValueError("a link with loss needs a round trip (rtt_ms > 0) or loss_penalty_ms > 0")

    @property
    def penalty_s(self) -> float:
        return 2 * self.one_way_s if self.loss_penalty_ms is None else self.loss_penalty_ms / 1000.0

    def delay(self, rng: random.Random) -> float:
        """One chunk's one-way delay in s: the propagation time, varied by the jitter, never below 0."""
        if not self.jitter_ms:
            return self.one_way_s
        spread = self.jitter_ms / 1000.0
        vary = rng.uniform(-spread, spread) if self.jitter == "uniform" else rng.gauss(0.0, spread)
        return max(0.0, self.one_way_s + vary)

    def segments_to_loss(self, rng: random.Random) -> float:
        """How many segments pass before the next lost one (geometric; infinite without loss)."""
        if not self.loss:
            return math.inf
        return math.floor(math.log(1.0 - rng.random()) / math.log(1.0 - self.loss))


class Flow:
    """One direction of one connection: the chunks it read, waiting for the line, then their delivery in order."""

    def __init__(self, link: WanLink, site: str, direction: str, writer: asyncio.StreamWriter) -> None:
        self.link, self.site, self.direction, self.writer = link, site, direction, writer
        self.pending: deque[tuple[float, bytes]] = deque()  # (read at, chunk) waiting for the line
        self.pending_bytes = 0
        self.room = asyncio.Event()  # set while it may read more
        self.room.set()
        self.empty = asyncio.Event()  # set while nothing waits for the line
        self.empty.set()
        self.deliveries: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self.last_due = 0.0
        self.until_loss = link.impairment.segments_to_loss(link.rng)

    def sent(self, chunk: bytes, done: float) -> None:
        """The line finished serialising `chunk` at `done`: when it arrives on the other side."""
        impairment, rng = self.link.impairment, self.link.rng
        due = done + impairment.delay(rng)
        segments = -(-len(chunk) // MSS)
        if segments > self.until_loss:  # one or more of its segments are lost: resent about one round later
            while segments > self.until_loss:
                self.link.stats.add("lost_segments", 1)
                segments -= int(self.until_loss) + 1
                self.until_loss = impairment.segments_to_loss(rng)
            self.until_loss -= segments
            due += impairment.penalty_s
            self.link.stats.add("lost_chunks", 1)
        else:
            self.until_loss -= segments
        self.last_due = max(due, self.last_due)  # TCP delivers in order: a chunk waits for the one before it
        self.deliveries.put_nowait((self.last_due, chunk))

    async def deliver(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, chunk = await self.deliveries.get()
            if not chunk:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self.writer.write(chunk)
            await self.writer.drain()
            self.link.stats.add(self.direction, len(chunk))
            self.link.site_stats[self.site].add(self.direction, len(chunk))


class Line:
    """One direction of one site's access line, shared by all its connections: it serialises one chunk at a time
    at the bandwidth, taking the connections with chunks waiting in turn. Times are the line's own (a chunk
    starts when the line is free or when it was read, whichever is later), so a late wake-up of this task
    neither slows the line down nor shifts a chunk's delivery."""

    def __init__(self, bytes_per_s: float) -> None:
        self.bytes_per_s = bytes_per_s
        self.free_at = 0.0
        self.turns: deque[Flow] = deque()  # flows with chunks waiting, in turn order
        self.wake = asyncio.Event()

    def queue(self, flow: Flow, read_at: float, chunk: bytes) -> None:
        if not flow.pending:
            self.turns.append(flow)
        flow.pending.append((read_at, chunk))
        flow.pending_bytes += len(chunk)
        flow.empty.clear()
        if flow.pending_bytes > READ_AHEAD:
            flow.room.clear()
        self.wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.turns:
                self.wake.clear()
                await self.wake.wait()
                continue
            flow = self.turns.popleft()
            read_at, chunk = flow.pending.popleft()
            flow.pending_bytes -= len(chunk)
            if flow.pending_bytes <= READ_AHEAD:
                flow.room.set()
            if flow.pending:
                self.turns.append(flow)
            else:
                flow.empty.set()
            self.free_at = max(self.free_at, read_at) + len(chunk) / self.bytes_per_s
            flow.sent(chunk, self.free_at)
            wait = self.free_at - loop.time()
            if wait > 0:  # the next chunk is chosen when the line is free, among the connections waiting then
                await asyncio.sleep(wait)


class WanLink:
    """A relay from free localhost ports (one per site) to `target_port`, in its own thread and event loop:
    `with WanLink(8002, rtt_ms=20, mbit=100, sites=["site-1", "site-2"]) as link: ... link.ports["site-1"] ...`.
    Without `sites` it serves one site, "site", on `link.port`."""

    def __init__(
        self,
        target_port: int,
        rtt_ms: float = 0.0,
        mbit: float | None = None,
        target_host: str = "127.0.0.1",
        sites: tuple[str, ...] | list[str] = ("site",),
        jitter_ms: float = 0.0,
        jitter: str = "uniform",
        loss: float = 0.0,
        loss_penalty_ms: float | None = None,
        seed: int = 0,
    ) -> None:
        if rtt_ms < 0 or (mbit is not None and mbit <= 0):
            raise ValueError(f"a link needs rtt_ms >= 0 and mbit > 0, got rtt_ms={rtt_ms}, mbit={mbit}")
        if not sites or len(set(sites)) != len(sites):
            raise ValueError(f"a link needs one or more distinct sites, got {sites}")
        self.target = (target_host, target_port)
        self.one_way_s = rtt_ms / 2000.0
        self.bytes_per_s = mbit * 1e6 / 8 if mbit else None
        self.impairment = Impairment(self.one_way_s, jitter_ms, jitter, loss, loss_penalty_ms)
        self.rng = random.Random(seed)
        self.sites = tuple(sites)
        self.stats = LinkStats()
        self.site_stats = {site: LinkStats() for site in self.sites}
        self.ports: dict[str, int] = {}
        self.port = 0  # the first site's
        self._lines: dict[tuple[str, str], Line] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="wan-link", daemon=True)
        self._servers: list[asyncio.base_events.Server] = []

    def __enter__(self) -> WanLink:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> int:
        async def open_all() -> None:
            for site in self.sites:
                server = await asyncio.start_server(
                    lambda r, w, s=site: self._connect(s, r, w), "127.0.0.1", 0, family=socket.AF_INET
                )
                self._servers.append(server)
                self.ports[site] = server.sockets[0].getsockname()[1]
                if self.bytes_per_s:
                    for direction in ("up", "down"):
                        line = self._lines[site, direction] = Line(self.bytes_per_s)
                        asyncio.ensure_future(line.run())

        self._thread.start()
        asyncio.run_coroutine_threadsafe(open_all(), self._loop).result(10)
        self.port = self.ports[self.sites[0]]
        return self.port

    def stop(self) -> None:
        async def close_all() -> None:
            for server in self._servers:
                server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    def summary(self) -> dict:
        """The link's settings and what it carried, in all and per site (poc/run.sh's results/link.json)."""
        return {
            "rtt_ms": self.one_way_s * 2000.0,
            "mbit": self.bytes_per_s * 8 / 1e6 if self.bytes_per_s else None,
            "jitter_ms": self.impairment.jitter_ms,
            "jitter": self.impairment.jitter,
            "loss": self.impairment.loss,
            "loss_penalty_ms": self.impairment.penalty_s * 1000.0,
            "shared_by": "site",
            **self.stats.as_dict(),
            "lost_chunks": self.stats.lost_chunks,
            "lost_segments": self.stats.lost_segments,
            "sites": {site: stats.as_dict() for site, stats in self.site_stats.items()},
        }

    async def _connect(self, site: str, site_reader: asyncio.StreamReader, site_writer: asyncio.StreamWriter) -> None:
        self.stats.add("connections", 1)
        self.site_stats[site].add("connections", 1)
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            site_writer.close()
            return
        try:
            await asyncio.gather(
                self._carry(site, site_reader, server_writer, "up"),
                self._carry(site, server_reader, site_writer, "down"),
                return_exceptions=True,
            )
        except asyncio.CancelledError:  # the link stops: end quietly (asyncio would log the cancelled handler)
            site_writer.close()
            server_writer.close()

    async def _carry(
        self, site: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str
    ) -> None:
        """One direction of one connection: through the site's line (or straight on without a bandwidth),
        then delayed by the one-way time."""
        loop = asyncio.get_running_loop()
        flow = Flow(self, site, direction, writer)
        line = self._lines.get((site, direction))
        delivering = asyncio.ensure_future(flow.deliver())
        try:
            while chunk := await reader.read(CHUNK):
                if line is None:
                    flow.sent(chunk, loop.time())
                else:
                    line.queue(flow, loop.time(), chunk)
                    await flow.room.wait()
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:  # the link stops
            delivering.cancel()
            writer.close()
            raise
        await flow.empty.wait()  # what the line still holds of this connection goes out first
        flow.deliveries.put_nowait((0.0, b""))
        try:
            await delivering
        except (ConnectionError, OSError):
            pass
        writer.close()
