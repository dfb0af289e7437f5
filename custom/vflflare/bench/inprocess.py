"""In-process VFL runs for the report suites, whose sites can be inspected afterwards."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vflflare.bench.splits import SITES
from vflflare.config import JobConfig
from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables
from vflflare.data.types import SiteTables
from vflflare.protocol.inprocess import InProcessTransport
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.setup import SERVER
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.tracking import LogTracker


def limit_threads() -> None:
    """2 cores are shared with other work: one intra-op thread keeps runs comparable."""
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def site_features(
    root: Path, site: str, seed: int, numeric_transform: str = "standard"
) -> tuple[SiteTables, dict[str, int], dict[str, int]]:
    """A site's preprocessed tables (exactly what its bottom model sees under that numeric_transform)
    and ID -> row maps."""
    tables = load_site_tables(site, DataRequest(SITES, str(root), seed, numeric_transform))
    return tables, {i: r for r, i in enumerate(tables.train_ids)}, {i: r for r, i in enumerate(tables.test_ids)}


class InspectableRuntime(SiteRuntime):
    """A site runtime that keeps its local SSL statistics and, at the few-shot download, its local
    model's class probabilities on the unaligned rows and the p^ it received, so diagnostics can score
    them against the true labels afterwards. Sites deliberately answer no prediction request (nothing
    but representations may leave a site), so this reads the party's state in process."""

    def handle(self, task: str, payload: dict[str, Any]) -> dict[str, Any]:
        party = self.party
        if task == "oneshot_update":
            self.oneshot_stats = party.client_update(payload["grads"], int(payload["num_classes"]))
            self.oneshot_unaligned_probs = self._local_probs()
        elif task == "fewshot_update":
            self.fewshot_probs = np.asarray(payload["probs"], dtype=np.float32)
            self.fewshot_stats = party.client_update_fewshot(payload["probs"])
        else:
            return super().handle(task, payload)
        return party.representations(list(payload["represent"]))

    def _local_probs(self) -> np.ndarray:
        party = self.party
        party.encoder.eval()
        with torch.no_grad():
            logits = party.state["ssl_head"](party.encode(party.train_batch(party.rows_of("unaligned"))))
        return torch.softmax(logits, dim=1).cpu().numpy()

    def ids(self, part: str) -> list[str]:
        return [self.party.view.train_ids[int(r)] for r in self.party.rows_of(part)]

    def temporary_labels(self) -> np.ndarray:
        return self.party.state["temporary_labels"].numpy()


def run_vfl(
    cfg: JobConfig, root: Path, runtime: type[SiteRuntime] = SiteRuntime, sites: list[str] = SITES
) -> tuple[dict, dict[str, SiteRuntime]]:
    """run_inprocess, keeping the site runtimes for inspection."""
    runtimes = {s: runtime(s, str(root)) for s in sites}
    net = InProcessTransport(runtimes, cfg.wire_dtype)
    result = run_algorithm(
        net,
        cfg,
        lambda: load_label_tables(SERVER, DataRequest(sites, str(root), cfg.seed)),
        LogTracker("vflflare.server"),
    )
    return result, runtimes


def test_inference_bytes(result: dict) -> int:
    """Payload of the test-row representations in a result: inference, not training, traffic.
    Every method uploads them exactly once (rep_dim floats per row and site, as one tensor)."""
    cfg = result["config"]
    dtype = cfg.get("wire_dtype") or ("float16" if cfg.get("fp16") else "float32")
    width, per_tensor = {"float32": (4, 0), "float16": (2, 0), "bfloat16": (2, 0), "int8": (1, 4)}[dtype]
    return (int(result["rows"]["test"]) * int(cfg["rep_dim"]) * width + per_tensor) * len(result["sites"])
