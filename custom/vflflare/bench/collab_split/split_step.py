"""One split-NN step of vanilla VFL, in plain PyTorch (no NVFlare import): the work both channels
carry, so the aux path (vflflare's job) and the Collab path do the same thing per batch.

- A feature party holds TabularEncoder(numeric_dim, cardinalities, 64, 32) on its own columns of the
  aligned rows. One step = apply the previous batch's gradient (backward + Adam) and forward the next
  batch's rows; it returns the 32x32 float32 representations.
- The label party holds a linear head on the concatenated K x 32 representations, cross-entropy,
  Adam lr 0.01; it returns one 32x32 gradient per site.

`train_split` runs vflflare's pipelined schedule (algorithms/split_training.py `_train_epoch`): one
round trip per batch carries (previous gradient, next rows) down and representations up, plus one
trailing gradient-only round trip per epoch (not timed, as in vflflare). `call_sites` is what differs
between an in-process loop and the Collab job; everything else is shared.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from vflflare.data.loading import DataRequest, load_label_tables, load_site_tables
from vflflare.models.heads import MLPHead
from vflflare.models.tabular import TabularEncoder
from vflflare.seeding import derive_seed, seeded_init

SEED = 0
BATCH_SIZE = 32
LR = 0.01
HIDDEN_DIM = 64
REP_DIM = 32
VAL_FRACTION = 0.2  # as vflflare: the first 20 % of the aligned labeled rows are held out, never trained on

# (previous gradient per site or None, next rows or None) -> representations per site
CallSites = Callable[[dict[str, np.ndarray] | None, np.ndarray | None], dict[str, np.ndarray]]


def aligned_training_ids(data_root: str, seed: int = SEED) -> tuple[list[str], np.ndarray]:
    """The aligned labeled rows the split-NN trains on, in one fixed order (the label file's, after the
    validation share), and their labels. The label party's file lists exactly the aligned rows."""
    labels = load_label_tables("server", DataRequest((), data_root, seed))
    n_val = int(round(VAL_FRACTION * len(labels.train_ids)))
    return list(labels.train_ids[n_val:]), np.asarray(labels.train_labels[n_val:], dtype=np.int64)


def make_encoder(numeric_dim: int, cardinalities) -> TabularEncoder:
    """TabularEncoder with one hidden layer of HIDDEN_DIM and REP_DIM outputs (vflflare's default model)."""
    return TabularEncoder(numeric_dim, cardinalities, hidden=(HIDDEN_DIM,), rep_dim=REP_DIM)


class FeatureSite:
    """A feature party's bottom model f_k on its columns of the aligned training rows."""

    def __init__(self, site: str, data_root: str, aligned_ids: list[str], seed: int = SEED) -> None:
        tables = load_site_tables(site, DataRequest((), data_root, seed))
        position = {row_id: i for i, row_id in enumerate(tables.train_ids)}
        missing = [row_id for row_id in aligned_ids[:5] if row_id not in position]
        if missing:
            raise ValueError(f"site '{site}': aligned IDs {missing} are not in its train table")
        block = tables.train.take(np.asarray([position[row_id] for row_id in aligned_ids], dtype=np.int64))
        self.site = site
        self.numeric = torch.as_tensor(block.numeric, dtype=torch.float32)
        self.categorical = torch.as_tensor(block.categorical, dtype=torch.int64)
        with seeded_init(derive_seed(seed, f"collab-bench/encoder/{site}")):
            self.encoder = make_encoder(self.numeric.shape[1], block.cardinalities)
        self.optimizer = torch.optim.Adam(self.encoder.parameters(), lr=LR)
        self._out: torch.Tensor | None = None

    @property
    def numeric_dim(self) -> int:
        return int(self.numeric.shape[1])

    def step(self, grad: np.ndarray | None, rows: np.ndarray | None) -> np.ndarray | None:
        """Backward + Adam step on the previous batch's gradient, then forward the next rows."""
        if grad is not None:
            if self._out is None:
                raise RuntimeError(f"site '{self.site}': a gradient arrived without a preceding forward")
            grad_t = torch.as_tensor(np.asarray(grad, dtype=np.float32))
            if grad_t.shape != self._out.shape:
                raise ValueError(f"site '{self.site}': gradient {tuple(grad_t.shape)} != reps {tuple(self._out.shape)}")
            self.optimizer.zero_grad()
            self._out.backward(grad_t)
            self.optimizer.step()
            self._out = None
        if rows is None:
            return None
        index = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        self.encoder.train()
        self._out = self.encoder(self.numeric[index], self.categorical[index])
        return self._out.detach().numpy().astype(np.float32)


class LabelHead:
    """The label party: linear head on the concatenated representations, cross-entropy, Adam."""

    def __init__(self, sites: list[str], labels: np.ndarray, num_classes: int = 2, seed: int = SEED) -> None:
        self.sites = list(sites)
        self.labels = torch.as_tensor(labels, dtype=torch.int64)
        with seeded_init(derive_seed(seed, "collab-bench/head")):
            self.head = MLPHead(REP_DIM * len(self.sites), num_classes, 0)
        self.optimizer = torch.optim.Adam(self.head.parameters(), lr=LR)

    def step(self, rows: np.ndarray, reps: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
        per_site = [torch.as_tensor(np.asarray(reps[s], dtype=np.float32)).requires_grad_(True) for s in self.sites]
        self.head.train()
        loss = F.cross_entropy(self.head(torch.cat(per_site, dim=1)), self.labels[torch.as_tensor(rows)])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {s: h.grad.numpy().astype(np.float32) for s, h in zip(self.sites, per_site)}, float(loss.item())


def epoch_orders(n_rows: int, epochs: int, seed: int = SEED) -> list[np.ndarray]:
    rng = np.random.default_rng(derive_seed(seed, "collab-bench/order"))
    return [rng.permutation(n_rows) for _ in range(epochs)]


def train_split(
    call_sites: CallSites,
    label: LabelHead,
    n_rows: int,
    epochs: int,
    batch_size: int = BATCH_SIZE,
    seed: int = SEED,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict:
    """vflflare's pipelined split-NN schedule. Each per-batch round trip (all sites) is timed on the
    calling side, like vflflare's ledger.timed_step(). Returns per-step seconds and losses."""
    step_s: list[float] = []
    losses: list[float] = []
    epoch_loss: list[float] = []
    for order in epoch_orders(n_rows, epochs, seed):
        pending: dict[str, np.ndarray] | None = None
        start_loss = len(losses)
        for start in range(0, n_rows, batch_size):
            if should_stop():
                raise RuntimeError("run aborted")
            rows = order[start : start + batch_size]
            t0 = time.perf_counter()
            reps = call_sites(pending, rows)
            step_s.append(time.perf_counter() - t0)
            pending, loss = label.step(rows, reps)
            losses.append(loss)
        call_sites(pending, None)  # the last batch's gradient, not timed (as in vflflare)
        epoch_loss.append(float(np.mean(losses[start_loss:])))
    return {"step_s": step_s, "losses": losses, "epoch_loss": epoch_loss}


def latency(step_s: list[float], skip: int = 0) -> dict:
    """{'steps', 'median_ms', 'p90_ms'} with vflflare's definitions (ledger.step_latency)."""
    ms = sorted(1000 * s for s in step_s[skip:])
    if not ms:
        return {}
    return {
        "steps": len(ms),
        "median_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3),
    }


def run_reference(data_root: str, sites: list[str], epochs: int, seed: int = SEED) -> dict:
    """The same model and schedule in one process, sites called one after another: the numbers the
    Collab job must reproduce, and the compute floor of one step."""
    torch.set_num_threads(1)
    ids, labels = aligned_training_ids(data_root, seed)
    parties = {s: FeatureSite(s, data_root, ids, seed) for s in sites}
    label = LabelHead(sites, labels, seed=seed)

    def call_sites(pending, rows):
        return {s: p.step(None if pending is None else pending[s], rows) for s, p in parties.items()}

    return train_split(call_sites, label, len(ids), epochs, seed=seed)
