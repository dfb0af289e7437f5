"""The same phases without NVFlare: sites are objects in this process, messages are still encoded
to bytes so payload and wire accounting match the NVFlare path. For fast tests and as the reference
for measuring NVFlare's overhead."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vflflare import wire
from vflflare.config import SERVER, JobConfig
from vflflare.data.loading import load_label_tables
from vflflare.privacy.enforcement import Enforcement
from vflflare.protocol.ledger import CommLedger
from vflflare.protocol.model_ids import new_model_id
from vflflare.protocol.payload import Payload, decode, encode
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.protocol.topology import COORDINATOR, check_job_sites
from vflflare.protocol.views import job_data_request
from vflflare.torch_runtime import prepare_torch
from vflflare.tracking import LogTracker


class InProcessTransport:
    def __init__(self, runtimes: dict[str, SiteRuntime], wire_dtype: str = "float32") -> None:
        self.runtimes = runtimes
        self.sites = list(runtimes)
        self.ledger = CommLedger(wire_dtype)

    def announce_model(self, model_id: str) -> None:
        for runtime in self.runtimes.values():
            runtime.model_id = model_id

    def exchange(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        self.ledger.count_round("exchange")
        return self._send(task, payloads)

    def step(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        self.ledger.count_round("step")
        return self._send(task, payloads)

    def _send(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        replies = {}
        for site, payload in payloads.items():
            sent = encode(payload, self.ledger.wire_dtype)
            request = wire.dumps(sent)
            self.ledger.record(site, "down", sent, len(request))
            runtime = self.runtimes[site]
            reply = encode(runtime.handle(task, decode(wire.loads(request))), runtime.wire_dtype)
            data = wire.dumps(reply)
            self.ledger.record(site, "up", reply, len(data))
            replies[site] = decode(wire.loads(data))
        return replies


def run_inprocess(
    cfg: JobConfig,
    sites: list[str],
    data_root: str | None,
    runs_root: str | None = None,
    enforce: Mapping[str, Enforcement] | None = None,
) -> dict:
    """runs_root: where the coordinator (runs_root/server) and each site (runs_root/<site>) keep the
    checkpoints of a run with cfg.checkpoint or cfg.resume, and the models it leaves (`model_id` in the
    result names them: `inprocess-<algorithm>-<time>`, also its `job_id`, as no NVFlare job runs). enforce: by party
    (a site or "server"), the defenses its local configuration
    enforces (privacy/enforcement.py), as a deployment's parties read them from their local/vflflare.json."""
    enforce = enforce or {}
    check_job_sites(COORDINATOR, sites, cfg.sites, 2, data_root)  # a site left out fails, named (topology.py)
    prepare_torch(cfg.num_threads)

    def root(party: str) -> str | None:
        return str(Path(runs_root) / party) if runs_root else None

    runtimes = {s: SiteRuntime(s, data_root, runs_root=root(s), enforce=enforce.get(s)) for s in sites}
    net = InProcessTransport(runtimes, cfg.wire_dtype)
    job_id = new_model_id("inprocess", cfg.algorithm, [root(p) for p in (SERVER, *sites)]) if runs_root else None
    results = run_algorithm(
        net,
        cfg,
        lambda: load_label_tables(SERVER, job_data_request(sites, data_root, cfg)),
        LogTracker("vflflare.server"),
        runs_root=root(SERVER),
        job_id=job_id,
        enforce=enforce.get(SERVER),
        model_id=job_id,
        data_root=data_root,
    )
    if job_id is not None:  # NVFlare's sites save on the coordinator's last request; here, once it has run
        for runtime in runtimes.values():
            runtime.save_model(job_id)
    return results
