"""Shared pieces of the benchmark scripts: credit-default splits, the rows every method is scored on,
in-process VFL runs whose sites can be inspected afterwards, and JSON-lines result files.

Split seed = job seed: each seed is a fresh draw of the N_o aligned rows and of the test rows, so the
spread over seeds includes which customers happen to be shared, not only the initial weights.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import roc_auc_score

from vflflare import cli
from vflflare.bench.provenance import environment as provenance_environment
from vflflare.bench.provenance import git_state
from vflflare.config import JobConfig
from vflflare.data.loading import load_label_tables, load_site_tables
from vflflare.data.sources import load_source
from vflflare.data.types import SiteTables
from vflflare.protocol.alignment import align, hash_ids
from vflflare.protocol.inprocess import InProcessTransport
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.setup import SERVER, alignment_salt
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.tracking import LogTracker

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "benchmarks" / "runs"  # scratch: workspaces, models
COMMITTED = REPO / "benchmarks" / "results"  # the compact records behind the reports' tables
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
DEFAULT_SPLITS = Path("/tmp/vflflare-bench/splits")
SITES = ["site-1", "site-2"]
LABEL_LEADER = "site-1"  # the party that would own the labels in the local-only baseline


def limit_threads() -> None:
    """2 cores are shared with other work: one intra-op thread keeps runs comparable."""
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def prepare_split(
    data_dir: Path,
    overlap: int,
    seed: int,
    splits_dir: Path = DEFAULT_SPLITS,
    dataset: str = "credit_default",
    parties: int = len(SITES),
    label_owner: str | None = None,
    active_site_labels: bool = False,
) -> Path:
    """`vflflare split --dataset D --sites K --overlap N --seed S [--label-owner O [--active-site-labels]]`
    once per argument set."""
    name = f"{dataset}{f'_k{parties}' if parties != len(SITES) else ''}_n{overlap}_s{seed}"
    out = splits_dir / (f"{name}_labels_{label_owner}{'_all' if active_site_labels else ''}" if label_owner else name)
    if not (out / "manifest.json").exists():
        code = cli.main([
            "split", "--dataset", dataset, "--data-dir", str(data_dir), "--sites", str(parties),
            "--overlap", str(overlap), "--seed", str(seed), "--out", str(out),
            *(["--label-owner", label_owner] if label_owner else []),
            *(["--active-site-labels"] if active_site_labels else []),
        ])  # fmt: skip
        if code != 0:
            raise RuntimeError(
                f"vflflare split failed for {dataset}, {parties} parties, overlap {overlap}, seed {seed}"
            )
    return out


@dataclass
class SplitRows:
    """IDs of the rows every method is trained, selected and scored on, as the VFL jobs define them."""

    train_ids: list[str]  # aligned labeled rows used for training (canonical order minus validation)
    val_ids: list[str]  # the first ceil(val_fraction * N_o) aligned rows in canonical order
    test_ids: list[str]


def job_rows(
    root: Path, seed: int, val_fraction: float, sites: list[str] = SITES, labeled_fraction: float = 1.0
) -> SplitRows:
    """The alignment a VFL job with this seed computes (same salt, same canonical order)."""
    labels = load_label_tables(SERVER, sites, str(root), seed)
    salt = alignment_salt(seed)
    key = "label:" + SERVER
    digests = hash_ids(labels.train_ids, salt)
    rows = align(
        {key: digests}, {key: hash_ids(labels.test_ids, salt)}, dict(zip(digests, labels.train_labels.tolist())),
        labels.num_classes, val_fraction, seed, SERVER, labeled_fraction,
    )[key]  # fmt: skip
    pick = lambda ids, positions: [ids[i] for i in positions]  # noqa: E731
    return SplitRows(
        pick(labels.train_ids, rows.train), pick(labels.train_ids, rows.val), pick(labels.test_ids, rows.test)
    )


class SourceTable:
    """A whole source table by ID: raw features (categorical columns one-hot), true labels. For the
    baselines that see more than one party (trees, centralized) and for scoring pseudo-labels against
    the truth."""

    def __init__(self, data_dir: Path, dataset: str = "credit_default") -> None:
        frame, labels, ids, categorical, _ = load_source(dataset, data_dir)
        frame = pd.get_dummies(frame, columns=list(categorical), dtype=np.float32) if categorical else frame
        self.frame = frame.set_axis(pd.Index(ids, name="id"))
        self.labels = pd.Series(labels, index=self.frame.index)

    def xy(self, ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return self.frame.loc[ids].to_numpy(np.float32, copy=True), self.y(ids)

    def y(self, ids: list[str]) -> np.ndarray:
        return self.labels.loc[ids].to_numpy(np.int64, copy=True)


TREE_DEPTHS = (2, 4, 6)


def _boosted_trees(depth: int, seed: int) -> Any:
    try:
        from xgboost import XGBClassifier
    except ImportError:
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(
            max_depth=depth, learning_rate=0.05, max_iter=1000, early_stopping=True, random_state=seed
        )
    return XGBClassifier(
        n_estimators=1000, learning_rate=0.05, max_depth=depth, subsample=0.8, colsample_bytree=0.8,
        early_stopping_rounds=50, eval_metric="logloss", n_jobs=1, random_state=seed,
    )  # fmt: skip


def trees(train_ids: list[str], rows: SplitRows, table: SourceTable, seed: int) -> dict[str, Any]:
    """Gradient-boosted trees on every party's columns of train_ids: depth from TREE_DEPTHS by
    validation AUC, rounds by early stopping on validation log-loss."""
    (train_x, train_y), (val_x, val_y), (test_x, test_y) = map(table.xy, (train_ids, rows.val_ids, rows.test_ids))
    best: tuple[float, int, Any] | None = None
    for depth in TREE_DEPTHS:
        model = _boosted_trees(depth, seed)
        if hasattr(model, "early_stopping_rounds"):
            model.fit(train_x, train_y, eval_set=[(val_x, val_y)], verbose=False)
        else:  # sklearn's trees hold out their own share of the training rows for early stopping
            model.fit(train_x, train_y)
        val_auc = float(roc_auc_score(val_y, model.predict_proba(val_x)[:, 1]))
        if best is None or val_auc > best[0]:
            best = (val_auc, depth, model)
    val_auc, depth, model = best
    return {
        "metrics": {"val_auc": val_auc, "test_auc": float(roc_auc_score(test_y, model.predict_proba(test_x)[:, 1]))},
        "training": {"depth": depth, "train_rows": len(train_ids), "library": type(model).__module__.split(".")[0]},
    }


def site_features(
    root: Path, site: str, seed: int, numeric_transform: str = "standard"
) -> tuple[SiteTables, dict[str, int], dict[str, int]]:
    """A site's preprocessed tables (exactly what its bottom model sees under that numeric_transform)
    and ID -> row maps."""
    tables = load_site_tables(site, SITES, str(root), seed, numeric_transform)
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
        net, cfg, lambda: load_label_tables(SERVER, sites, str(root), cfg.seed), LogTracker("vflflare.server")
    )
    return result, runtimes


def test_inference_bytes(result: dict) -> int:
    """Payload of the test-row representations in a result: inference, not training, traffic.
    Every method uploads them exactly once (rep_dim floats per row and site, as one tensor)."""
    cfg = result["config"]
    dtype = cfg.get("wire_dtype") or ("float16" if cfg.get("fp16") else "float32")
    width, per_tensor = {"float32": (4, 0), "float16": (2, 0), "bfloat16": (2, 0), "int8": (1, 4)}[dtype]
    return (int(result["rows"]["test"]) * int(cfg["rep_dim"]) * width + per_tensor) * len(result["sites"])


def append_jsonl(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def refuse_mixed_settings(path: Path, overrides: dict[str, Any]) -> None:
    """Exit naming them when `path` holds runs with other --set overrides: a resume keyed on the run's
    cell would otherwise mix runs of two settings in one file."""
    other = {json.dumps(r.get("overrides", {}), sort_keys=True) for r in read_jsonl(path)} - {
        json.dumps(overrides, sort_keys=True)
    }
    if other:
        raise SystemExit(f"{path} holds runs with --set {', '.join(sorted(other))}, not {overrides}: use another --out")


def mean_std(values: list[float], digits: int = 3) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def environment() -> dict[str, object]:
    """Where a record came from: the commit (and whether the package's code differed from it), the
    libraries and machine (vflflare.bench.provenance, as `vflflare bench` records them), torch threads."""
    return {**git_state(), **provenance_environment(), "torch_threads": torch.get_num_threads()}
