"""Credit default, 2 parties (first 10 attributes vs the other 13), N_o aligned labeled rows: test AUC
and communication of the VFL algorithms, next to the baselines a user would compare them with.

VFL methods run through `run_inprocess`'s driver (same phases and communication accounting as the
NVFlare jobs). Baselines are computed here, without federation, on the same rows: training = the
aligned labeled rows minus the validation rows, validation = the rows the VFL jobs hold out (first
20 % of the aligned rows in the job's canonical order), test = the split's aligned test rows.

- local_only: the label party's own MLP (bottom d->64->32 + linear head, Adam lr 0.01, B 32, early
  stopping on validation AUC) on site-1's 10 attributes, as if site-1 owned the labels;
- mlp_aligned: the same MLP on both sites' columns of the aligned labeled rows, trained centrally: what
  split-NN training on those rows could reach without federation's constraints (a reference, not a
  baseline a user would deploy);
- trees_aligned: gradient-boosted trees on the aligned labeled rows with all 23 attributes, i.e. what a
  user with the joined rows would train instead of VFL;
- trees_central: the same trees on every training row with all attributes and labels (upper bound).

Trees: xgboost (sklearn's HistGradientBoosting if absent), depth chosen from {2, 4, 6} by validation
AUC, rounds by early stopping on validation log-loss.

--set overrides apply to the tunable methods (one-shot, few-shot, few-shot + finetune). Preprocessing
keys (numeric_transform) are data, not algorithm: they also reach vanilla VFL, FedBCD and the MLP
baselines, recorded under the same variant, so every neural method sees the same inputs. The trees
take the raw columns: a monotone per-column transform does not change what trees can split on.

    python benchmarks/credit_default.py                      # everything, N_o 1000 and 2000, seeds 0-2
    python benchmarks/credit_default.py --methods oneshot fewshot --variant tuned --set class_balance=...
    python benchmarks/credit_default.py --methods vanilla oneshot fewshot local_only mlp_aligned \
        --variant signed_log --set numeric_transform=signed_log
    python benchmarks/credit_default.py --table              # print the tables of the results file
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from common import (
    COMMITTED, DEFAULT_DATA_DIR, DEFAULT_SPLITS, LABEL_LEADER, SITES, SourceTable, SplitRows, append_jsonl, environment,
    job_rows, limit_threads, mean_std, prepare_split, read_jsonl, run_vfl, site_features, test_inference_bytes, trees,
)  # fmt: skip
from vflflare.algorithms.blocks.classifier import fit_head, predict_proba
from vflflare.cli import parse_overrides
from vflflare.config import JobConfig
from vflflare.algorithms.registry import make_config
from vflflare.models.heads import MLPHead
from vflflare.models.tabular import TabularEncoder
from vflflare.seeding import derive_seed, seeded_init
from vflflare.tracking import LogTracker

RESULTS = COMMITTED / "credit_default.jsonl"  # compact records: numbers and settings
FINETUNE_EPOCHS = 100  # an upper bound: finetuning stops early after split_patience epochs without gain

VFL_METHODS: dict[str, dict[str, Any]] = {
    "vanilla": {"algorithm": "vanilla"},
    "fedbcd": {"algorithm": "fedbcd", "local_steps": 5},  # paper: Q = 5
    "oneshot": {"algorithm": "oneshot"},
    "fewshot": {"algorithm": "fewshot"},
    "fewshot+finetune": {"algorithm": "fewshot", "finetune_epochs": FINETUNE_EPOCHS},
}
BASELINES = ("local_only", "mlp_aligned", "trees_aligned", "trees_central")
METHODS = [*VFL_METHODS, *BASELINES]
# --set overrides are for our methods; the split-NN baselines keep the package defaults
TUNABLE = ("oneshot", "fewshot", "fewshot+finetune")
# ... except preprocessing keys, which every neural method gets (the trees read the raw columns)
PREPROCESSING_KEYS = ("numeric_transform",)
PREPROCESSED = ("vanilla", "fedbcd", "local_only", "mlp_aligned")


# ---------------------------------------------------------------------------------------- VFL methods
def run_vfl_method(method: str, overrides: dict[str, Any], root: Path, seed: int) -> dict[str, Any]:
    cfg = make_config({**VFL_METHODS[method], **overrides, "seed": seed})
    result, _ = run_vfl(cfg, root)
    comm = result["communication"]
    per_site = comm["per_site"].values()
    total_bytes = comm["total"]["payload_bytes"]
    return {
        "metrics": result["metrics"],
        "uploads_per_site": max(site["uploads"] for site in per_site),
        "downloads_per_site": max(site["downloads"] for site in per_site),
        "payload_mb": round(total_bytes / 1e6, 6),
        "train_payload_mb": round((total_bytes - test_inference_bytes(result)) / 1e6, 6),
        "training": {k: v for k, v in result["training"].items() if isinstance(v, (int, float, str))},
        "config": {k: v for k, v in cfg.to_dict().items() if k in {**VFL_METHODS[method], **overrides}},
    }


# ------------------------------------------------------------------------------------------ baselines
class LocalMLP(nn.Module):
    """Bottom model + head in one piece, for a party that holds its labels itself."""

    def __init__(self, numeric_dim: int, cfg: JobConfig) -> None:
        super().__init__()
        self.encoder = TabularEncoder(numeric_dim, [], cfg.model["hidden"], cfg.rep_dim)
        self.head = MLPHead(cfg.rep_dim, 2, cfg.classifier_hidden)

    def forward(self, numeric: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(numeric, numeric.new_zeros((len(numeric), 0), dtype=torch.int64)))


def mlp(
    root: Path, rows: SplitRows, table: SourceTable, seed: int, sites: list[str], numeric_transform: str = "standard"
) -> dict[str, Any]:
    """One MLP on the named sites' preprocessed columns side by side: the very input of their VFL bottom
    models, trained as one network by whoever holds the labels and these columns. Numeric block only:
    credit default has no categorical columns."""
    blocks = {"train": [], "val": [], "test": []}
    for site in sites:
        tables, train_index, test_index = site_features(root, site, seed, numeric_transform)
        for part, ids, index, block in (("train", rows.train_ids, train_index, tables.train.numeric),
                                        ("val", rows.val_ids, train_index, tables.train.numeric),
                                        ("test", rows.test_ids, test_index, tables.test.numeric)):
            blocks[part].append(block[[index[i] for i in ids]])
    train_x, val_x, test_x = (torch.as_tensor(np.concatenate(blocks[p], axis=1)) for p in ("train", "val", "test"))
    # the paper stops its baselines after 20 epochs without improvement
    cfg = make_config(seed=seed, classifier_epochs=100, classifier_patience=20)
    with seeded_init(derive_seed(seed, "mlp")):
        model = LocalMLP(train_x.shape[1], cfg)
    generator = torch.Generator().manual_seed(derive_seed(seed, "mlp:batches"))
    fit = fit_head(
        model, train_x, torch.as_tensor(table.y(rows.train_ids)), cfg, 2, generator, LogTracker("bench.mlp"), "mlp",
        (val_x, torch.as_tensor(table.y(rows.val_ids))),
    )  # fmt: skip
    return {
        "metrics": {
            "val_auc": float(fit.val_metric),
            "test_auc": float(roc_auc_score(table.y(rows.test_ids), predict_proba(model, test_x)[:, 1])),
        },
        "training": {"epochs": fit.epochs, "best_epoch": fit.best_epoch + 1, "sites": sites},
        "config": {"numeric_transform": numeric_transform} if numeric_transform != "standard" else {},
    }


def run_baseline(
    method: str, root: Path, rows: SplitRows, table: SourceTable, seed: int, overrides: dict[str, Any]
) -> dict[str, Any]:
    if method == "local_only":
        return mlp(root, rows, table, seed, [LABEL_LEADER], **overrides)
    if method == "mlp_aligned":
        return mlp(root, rows, table, seed, SITES, **overrides)
    if method == "trees_aligned":
        return trees(rows.train_ids, rows, table, seed)
    # every row of the whole table that is neither a test row nor a validation row
    held_out = set(rows.test_ids) | set(rows.val_ids)
    return trees([i for i in table.frame.index if i not in held_out], rows, table, seed)


# ------------------------------------------------------------------------------------------- tables
def _mean(records: list[dict], key: str) -> float:
    return float(np.mean([r[key] for r in records]))


def tables(records: list[dict]) -> str:
    groups: dict[tuple[int, str, str], list[dict]] = defaultdict(list)
    for record in records:
        groups[(record["overlap"], record["method"], record["variant"])].append(record)
    out = []
    for overlap in sorted({key[0] for key in groups}):
        vanilla = groups.get((overlap, "vanilla", "default"), [])
        vanilla_mb = _mean(vanilla, "train_payload_mb") if vanilla else None
        out += [
            f"\n**N_o = {overlap}** (mean ± std over seeds; times per site = uploads + downloads; MB = payload of all "
            "sites, 'train' without the one upload of test-row representations for inference)\n",
            "| method | variant | seeds | test AUC | val AUC | times per site | MB train | MB incl. test | vanilla MB / MB |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        order = {name: i for i, name in enumerate(METHODS)}
        for (_, method, variant), rows in sorted(
            ((k, v) for k, v in groups.items() if k[0] == overlap), key=lambda kv: (order.get(kv[0][1], 99), kv[0][2] != "default", kv[0][2])
        ):
            auc = mean_std([r["metrics"]["test_auc"] for r in rows])
            val = mean_std([r["metrics"]["val_auc"] for r in rows])
            if "payload_mb" in rows[0]:
                times = np.mean([r["uploads_per_site"] + r["downloads_per_site"] for r in rows])
                train_mb = _mean(rows, "train_payload_mb")
                ratio = f"{vanilla_mb / train_mb:.1f}x" if vanilla_mb and method != "vanilla" else "-"
                comm = [f"{times:.0f}", f"{train_mb:.2f}", f"{_mean(rows, 'payload_mb'):.2f}", ratio]
            else:
                comm = ["0 (not federated)", "-", "-", "-"]
            out.append("| " + " | ".join([method, variant, str(len(rows)), auc, val, *comm]) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--overlaps", nargs="+", type=int, default=[1000, 2000])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--variant", default="default", help="name under which --set overrides are recorded")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"config override for {', '.join(TUNABLE)}; "
                             f"{', '.join(PREPROCESSING_KEYS)} also for {', '.join(PREPROCESSED)}")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--splits", type=Path, default=DEFAULT_SPLITS, help="where the split folders go")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON lines; runs already in it are skipped")
    parser.add_argument("--table", action="store_true", help="only print the tables of --out")
    args = parser.parse_args()
    overrides = parse_overrides(args.set)
    if overrides and args.variant == "default":
        parser.error("name the variant (--variant) when overriding the defaults")
    preprocessing = {k: v for k, v in overrides.items() if k in PREPROCESSING_KEYS}

    def method_overrides(method: str) -> dict[str, Any]:
        return overrides if method in TUNABLE else preprocessing if method in PREPROCESSED else {}
    if not args.table:
        limit_threads()
        table = SourceTable(args.data_dir)
        env = environment()
        done = {(r["method"], r["variant"], r["overlap"], r["seed"]) for r in read_jsonl(args.out)}
        for overlap in args.overlaps:
            for seed in args.seeds:
                root = prepare_split(args.data_dir, overlap, seed, args.splits)
                rows = job_rows(root, seed, make_config().val_fraction)
                for method in args.methods:
                    variant = args.variant if method_overrides(method) or method in TUNABLE else "default"
                    if (method, variant, overlap, seed) in done:
                        continue
                    start = time.perf_counter()
                    if method in VFL_METHODS:
                        record = run_vfl_method(method, method_overrides(method), root, seed)
                    else:
                        record = run_baseline(method, root, rows, table, seed, method_overrides(method))
                    record = {"method": method, "variant": variant, "overlap": overlap, "seed": seed,
                              "set": method_overrides(method), **record,
                              "wall_s": round(time.perf_counter() - start, 2), "env": env}
                    append_jsonl(args.out, record)
                    done.add((method, variant, overlap, seed))
                    print(f"{method:18s} {variant:10s} N_o={overlap} seed={seed} "
                          f"test_auc={record['metrics']['test_auc']:.4f} ({record['wall_s']:.0f} s)", flush=True)
    print(tables(read_jsonl(args.out)))


if __name__ == "__main__":
    main()
