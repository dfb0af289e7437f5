"""Liveness probes for the sites the coordinator is waiting on.

A site's task or step that is still pending after PROBE_AFTER_S gets a tiny aux request
(messages.PING_TOPIC) every PROBE_EVERY_S, in the background. A live site answers it at once, even
in the middle of a long local phase (aux messages are handled on their own threads). For a site
whose job process is gone, NVFlare answers the request itself with a communication error, because
the job's cell has no connection any more: that reply marks the site dead in SiteHealth. A probe
that merely times out proves nothing (a busy machine) and marks nothing.

NVFlare's own reaction to a dead site job (the site's parent reports it, and the server fails the
whole job about 2 s later) carries no site name into the server job, and its dead-job report comes
up to a heartbeat (10 s) later, often after the job has ended: the probes name the site first.

A site is only probed once it has shown that its job is up (it picked up or answered a task): before
that, a missing job cell means "still starting", not "dead". A site still not up `join_timeout` seconds
after the coordinator started (its job process never came up: a simulator site whose process failed to
start) is marked stopped, naming it, instead of being waited on until the task times out.

A probe in flight when the site dies never gets an answer (NVFlare does not fail pending requests
when their target goes away), and a busy site on a loaded machine can take a while to answer, so a
site may have several probes in flight: a new one every PROBE_EVERY_S, up to MAX_INFLIGHT.

A site that is up but hung is caught too, with limits sized to the work rather than to a whole task:
- a site that has answered neither its task nor any probe for `stall_timeout` seconds (a frozen
  process, a lost network) is marked stopped;
- a site answers a probe with the task it works on, the seconds since it last made progress (its
  WorkClock: any report to its tracker, such as an epoch's loss) and its longest gap between progress
  reports in that task. It is marked stopped once it has been quiet for `stall_limit` of those: the
  job's `stall_timeout`, or STALL_FACTOR times the longest gap so far when its epochs are slower.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from nvflare.apis.fl_constant import ReturnCode
from nvflare.apis.shareable import Shareable

from vflflare.flare.messages import UNREACHABLE_CODES, from_shareable
from vflflare.flare.site_health import SiteHealth

PROBE_AFTER_S = 0.5  # a split-NN step takes 10-70 ms; a phase task seconds to minutes
PROBE_EVERY_S = 0.5
PROBE_TIMEOUT_S = 2.0
MAX_INFLIGHT = 6  # per site: PROBE_TIMEOUT_S / PROBE_EVERY_S of them, plus headroom
STALL_FACTOR = 5.0

Ping = Callable[[str], Shareable | None]


def stall_limit(longest_gap_s: float, stall_timeout: float) -> float:
    """How long a site may go without progress in its task: slow epochs earn proportionally more."""
    return max(stall_timeout, STALL_FACTOR * longest_gap_s)


class WorkClock:
    """A site's side: the task it works on and when it last reported progress."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._task: str | None = None
        self._last = self._longest = 0.0

    def start(self, task: str) -> None:
        with self._lock:
            self._task, self._last, self._longest = task, time.monotonic(), 0.0

    def tick(self) -> None:
        with self._lock:
            if self._task is not None:
                now = time.monotonic()
                self._longest, self._last = max(self._longest, now - self._last), now

    def stop(self) -> None:
        with self._lock:
            self._task = None

    def report(self) -> dict:
        with self._lock:
            if self._task is None:
                return {}
            return {"task": self._task, "quiet_s": time.monotonic() - self._last, "longest_gap_s": self._longest}


class SiteProber:
    def __init__(
        self, ping: Ping, health: SiteHealth, sites: Iterable[str], stall_timeout: float, join_timeout: float = 120.0
    ) -> None:
        """ping(site): send the site one probe and return NVFlare's reply (None when there is none).
        join_timeout: how long after now a site may take to show that its job is up."""
        self._ping, self.health, self.stall_timeout = ping, health, stall_timeout
        self.join_timeout, self._started = join_timeout, time.monotonic()
        self._seen: set[str] = set()
        self._heard: dict[str, float] = {}  # site -> when it last answered anything
        self._last: dict[str, float] = {}
        self._inflight: dict[str, list[Future]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(
            max_workers=MAX_INFLIGHT * max(2, len(list(sites))), thread_name_prefix="vflflare-probe"
        )

    def seen(self, site: str) -> None:
        """`site` showed that its job is up: from now on a missing job cell means it stopped."""
        self._seen.add(site)
        self._heard[site] = time.monotonic()

    def watch(self, waiting: Iterable[str], waited_s: float) -> None:
        """Called while waiting on `waiting` for `waited_s` seconds: start the probes that are due, and
        mark stopped a site silent for stall_timeout."""
        if waited_s < PROBE_AFTER_S:
            return
        now = time.monotonic()
        with self._lock:
            for site in waiting:
                if site not in self._seen:
                    self._check_joined(site, now)
                    continue
                silent = min(now - self._heard.get(site, -math.inf), waited_s)
                if silent > self.stall_timeout:
                    self.health.mark_dead(
                        site,
                        f"it has answered neither its task nor any liveness probe for "
                        f"{silent:.0f} s (stall_timeout {self.stall_timeout:g} s)",
                    )
                    continue
                if now - self._last.get(site, 0.0) < PROBE_EVERY_S:
                    continue
                inflight = [f for f in self._inflight.get(site, []) if not f.done()]
                if len(inflight) < MAX_INFLIGHT:
                    self._last[site] = now
                    inflight.append(self._pool.submit(self.probe, site))
                self._inflight[site] = inflight

    def _check_joined(self, site: str, now: float) -> None:
        if now - self._started > self.join_timeout:
            self.health.mark_dead(
                site,
                f"it never joined the job: it picked up no task within join_timeout "
                f"{self.join_timeout:g} s of the job's start (did its job process start?)",
            )

    def not_joined(self, sites: Iterable[str]) -> list[str]:
        """Of `sites`, those that have not shown that their job is up."""
        return [site for site in sites if site not in self._seen]

    def probe_all(self, sites: Iterable[str]) -> None:
        """Probe every site of `sites` that is up, in parallel, now (NVFlare just aborted the job: the
        site that stopped answers "unreachable" at once)."""
        for site in sites:
            if site in self._seen:
                self._pool.submit(self.probe, site)

    def probe(self, site: str) -> bool:
        """Probe `site` now; returns False (and marks it dead) when NVFlare says it is unreachable."""
        try:
            reply = self._ping(site)
        except Exception:  # a probe that fails on our side says nothing about the site
            return True
        code = reply.get_return_code(ReturnCode.OK) if reply is not None else None
        if code in UNREACHABLE_CODES:
            self.health.mark_dead(
                site, f"its job process is unreachable (NVFlare answered a liveness probe with {code})"
            )
            return False
        if code == ReturnCode.OK:  # not a probe that timed out
            self._heard[site] = time.monotonic()
            busy = from_shareable(reply)  # the site's WorkClock report
            limit = stall_limit(busy.get("longest_gap_s", 0.0), self.stall_timeout)
            if busy and busy["quiet_s"] > limit:
                self.health.mark_dead(
                    site,
                    f"it has made no progress in task '{busy['task']}' for {busy['quiet_s']:.0f} s "
                    f"(limit {limit:.0f} s: stall_timeout, or {STALL_FACTOR:g} x its longest "
                    f"gap between progress reports); is it hung?",
                )
                return False
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
