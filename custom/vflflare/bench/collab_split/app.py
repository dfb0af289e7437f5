"""The split-NN step over NVFlare 2.9's Collab API: the server (label party) calls every site's
published `step` method directly, in parallel, once per batch.

Wiring (see job.py): CollabRecipe puts `SplitServer` on the server under a CollabController and
`SplitSite` on every site under a CollabExecutor. The controller syncs the sites' published
interfaces with two ordinary tasks, then runs `SplitServer.run` (@collab.main). Calls travel as
CellNet requests on the Collab channel; arguments and results are fobs-serialised Python objects
(numpy arrays here). A call on a proxy blocks its thread; the group call sends the same arguments to
every site, so per-site gradients go through one thread per site (ThreadPoolExecutor below), the
way vflflare's FlareTransport.step sends one aux request per site.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from nvflare.collab import collab
from nvflare.fuel.utils.log_utils import get_obj_logger

from vflflare.bench.collab_split.split_step import (
    SEED,
    FeatureSite,
    LabelHead,
    aligned_training_ids,
    latency,
    train_split,
)  # fmt: skip
from vflflare.flare.site_config import resolve_party_data_root

RESULTS_FILE = "collab_split_results.json"
ARRAYS, BYTES = "arrays", "bytes"  # payload modes of the per-batch call (see SplitServer)


def pack(array: np.ndarray | None) -> dict | None:
    """A numpy array as plain bytes + dtype + shape: fobs then sends it inside the call message."""
    if array is None:
        return None
    array = np.ascontiguousarray(array)
    return {"dtype": array.dtype.str, "shape": list(array.shape), "data": array.tobytes()}


def unpack(packed: dict | None) -> np.ndarray | None:
    if packed is None:
        return None
    return np.frombuffer(packed["data"], dtype=np.dtype(packed["dtype"])).reshape(packed["shape"])


class SplitSite:
    """A feature party: its bottom model and the published per-batch step."""

    def __init__(self, seed: int = SEED, num_threads: int = 1) -> None:
        self.seed = seed
        self.num_threads = num_threads
        self.party: FeatureSite | None = None
        self.data_root: str | None = None
        self.logger = get_obj_logger(self)

    @collab.init
    def start(self):
        torch.set_num_threads(self.num_threads)
        self.data_root = resolve_party_data_root(None, collab.fl_ctx, collab.site_name)

    @collab.publish
    def setup(self, aligned_ids: list):
        """Build the bottom model on this site's columns of the aligned rows (in the server's order)."""
        if not self.data_root:
            raise ValueError(f"site '{collab.site_name}': no data root (local/vflflare.json or VFLFLARE_DATA_ROOT)")
        self.party = FeatureSite(collab.site_name, self.data_root, list(aligned_ids), self.seed)
        self.logger.info(f"{collab.site_name}: {len(aligned_ids)} aligned rows, {self.party.numeric_dim} columns")
        return {"rows": len(aligned_ids), "numeric_dim": self.party.numeric_dim}

    @collab.publish
    def step(self, grad, rows, packed: bool = False):
        """Apply the previous batch's gradient, then return the next batch's representations.
        packed: grad, rows and the reply are pack()ed bytes instead of numpy arrays."""
        if self.party is None:
            raise RuntimeError(f"site '{collab.site_name}': step before setup")
        if packed:
            return pack(self.party.step(unpack(grad), unpack(rows)))
        return self.party.step(grad, rows)


class SplitServer:
    """The label party on the server; @collab.main is the training loop."""

    def __init__(
        self,
        epochs: int = 21,
        warmup_steps: int = 25,
        call_timeout: float = 60.0,
        seed: int = SEED,
        num_threads: int = 1,
        payload: str = ARRAYS,
    ) -> None:
        """payload: 'arrays' passes numpy arrays as they are (the natural call; NVFlare's fobs then moves
        every ndarray through a download transaction); 'bytes' passes them as pack()ed bytes, as
        vflflare's aux path does with its own msgpack codec."""
        if payload not in (ARRAYS, BYTES):
            raise ValueError(f"payload must be '{ARRAYS}' or '{BYTES}', got {payload!r}")
        self.payload = payload
        self.epochs = epochs
        self.warmup_steps = warmup_steps
        self.call_timeout = call_timeout
        self.seed = seed
        self.num_threads = num_threads
        self.logger = get_obj_logger(self)

    @collab.main
    def run(self):
        started = time.monotonic()
        torch.set_num_threads(self.num_threads)
        fl_ctx = collab.fl_ctx
        data_root = resolve_party_data_root(None, fl_ctx, "server")
        ids, labels = aligned_training_ids(data_root, self.seed)
        proxies = {p.name: p for p in sorted(collab.clients, key=lambda p: p.name)}
        sites = list(proxies)
        # setup sends the same argument to all: a group call fits
        replies = collab.clients(timeout=self.call_timeout).setup(aligned_ids=ids)
        if replies.failures:  # a failed call is not raised by a group call: it is listed here
            raise RuntimeError(f"setup failed: {dict(replies.failures)}")
        setup = dict(replies)
        label = LabelHead(sites, labels, seed=self.seed)
        pool = ThreadPoolExecutor(max_workers=max(2, len(sites)), thread_name_prefix="collab-split-step")

        packed = self.payload == BYTES

        def call_one(proxy, grad, rows):
            if packed:
                return unpack(proxy(timeout=self.call_timeout).step(grad=pack(grad), rows=pack(rows), packed=True))
            return proxy(timeout=self.call_timeout).step(grad=grad, rows=rows)

        def call_sites(pending, rows):
            # one call per site in parallel: each site gets only its own gradient
            futures = {
                site: pool.submit(call_one, proxy, None if pending is None else pending[site], rows)
                for site, proxy in proxies.items()
            }
            return {site: future.result() for site, future in futures.items()}

        t0 = time.monotonic()
        try:
            trained = train_split(
                call_sites, label, len(ids), self.epochs, seed=self.seed, should_stop=lambda: collab.is_aborted
            )
        finally:
            pool.shutdown(wait=False)
        result = {
            "path": "collab" if self.payload == ARRAYS else "collab_bytes",
            "payload": self.payload,
            "sites": sites,
            "setup": setup,
            "epochs": self.epochs,
            "step_latency": latency(trained["step_s"]),
            "step_latency_after_warmup": latency(trained["step_s"], self.warmup_steps),
            "warmup_steps": self.warmup_steps,
            "epoch_loss": trained["epoch_loss"],
            "losses": trained["losses"],
            "step_ms": [round(1000 * s, 4) for s in trained["step_s"]],
            "training_s": round(time.monotonic() - t0, 3),
            "wall_s": round(time.monotonic() - started, 3),
        }
        run_dir = Path(collab.workspace.get_run_dir(fl_ctx.get_job_id()))
        os.makedirs(run_dir, exist_ok=True)
        (run_dir / RESULTS_FILE).write_text(json.dumps(result))
        self.logger.info(
            f"collab split-NN: {result['step_latency']} (after warm-up {result['step_latency_after_warmup']}),"
            f" epoch loss {result['epoch_loss'][0]:.4f} -> {result['epoch_loss'][-1]:.4f}; {run_dir / RESULTS_FILE}"
        )
        return {k: result[k] for k in ("step_latency", "step_latency_after_warmup", "wall_s")}
