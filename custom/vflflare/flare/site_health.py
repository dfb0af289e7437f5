"""Which sites the coordinator knows to have stopped, and why.

Three things feed it, fastest first:
- the transport's probes (flare/transport.py): a site whose task or step has been pending for a
  while gets a tiny request (a probe); NVFlare answers "communication error" at once when the site's job
  cell is gone, which happens within a second of its job process dying;
- NVFlare's dead-job report (the site's parent process stops listing the job in its heartbeat, the
  server parent tells the job: `WFCommServer.process_dead_client_report`), within about 10 s;
- NVFlare's CLIENT_DISCONNECTED event, after the dead-client grace period (60 s by default).

NVFlare's own fastest reaction, failing the whole job when a site's parent reports its job process
died, carries no site name into the server job; that is why the probes exist. Readers on the
per-batch path only pay `bool(health)` while every site is alive.
"""

from __future__ import annotations

import threading
from collections.abc import Collection


class SiteHealth:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dead: dict[str, str] = {}  # site -> why we believe it stopped (first report wins)

    def __bool__(self) -> bool:
        """True once any site is known dead (a dict truth test: cheap enough for every step)."""
        return bool(self._dead)

    def mark_dead(self, site: str, reason: str) -> bool:
        """Record `site` as stopped; returns True when this is news."""
        with self._lock:
            if site in self._dead:
                return False
            self._dead[site] = reason
            return True

    def reason(self, site: str) -> str | None:
        return self._dead.get(site)

    def first_dead(self, sites: Collection[str]) -> str | None:
        """Of `sites`, the one first reported stopped, or None. The first report matters: once NVFlare
        aborts a job it also stops the other sites' job processes, which may then look dead too."""
        if not self._dead:
            return None
        with self._lock:
            return next((site for site in self._dead if site in sites), None)

    def dead(self) -> dict[str, str]:
        with self._lock:
            return dict(self._dead)
