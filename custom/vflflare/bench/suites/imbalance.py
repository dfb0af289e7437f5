"""What moves FixMatch's majority-class collapse and few-shot's pseudo-label selection on credit default.

For each named setting (config overrides) this runs one-shot and few-shot in-process and, besides the
AUCs, scores what the sites did against the true labels (which no party sees in a real job):

- after one-shot SSL: share of unaligned rows the site's local model predicts positive (truth: ~22 %)
  and the AUC of its positive-class probability on those rows (how much the site alone knows);
- few-shot selection: expected share of unaligned rows chosen (mean p^), the true positive share among
  them (p^-weighted), the accuracy of the pseudo-labels they get (the local model's argmax, Alg. 2
  line 11) and the share of positive pseudo-labels.

Decisions use val_auc (the jobs' own validation split); test_auc is reported, never selected on.

    vflflare bench run imbalance --methods paper distribution_alignment --set overlaps=[1000] --seeds 0 1 2
    vflflare bench tables         # REPORT.md §2 from the committed records (benchmarks/results/imbalance.jsonl)

The suite's "methods" are the named settings below (each runs one-shot and few-shot).
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import roc_auc_score

from vflflare.bench.inprocess import InspectableRuntime, limit_threads, run_vfl
from vflflare.bench.paths import COMMITTED, DEFAULT_SPLITS
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import SourceTable, prepare_split
from vflflare.bench.stats import mean_std
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table as register_table
from vflflare.registry import get_algorithm, make_config

RESULTS = COMMITTED / "imbalance.jsonl"  # compact records: numbers and settings

# The sweep's reference point: the paper's method with the constants the package had when the sweep
# ran (few-shot t = 0.6, then the default; ssl_epochs 10, tau 0.95, lambda_u 1, no class balancing).
# Every setting changes it in the named way only.
SWEEP_BASE: dict[str, Any] = {"fewshot_threshold": 0.6}

# name -> config overrides on top of SWEEP_BASE
SETTINGS: dict[str, dict[str, Any]] = {
    "paper": {},
    "no_unlabeled_loss": {"lambda_u": 0.0},
    "lambda_u_0.25": {"lambda_u": 0.25},
    "distribution_alignment": {"class_balance": "distribution_alignment"},
    "balanced_threshold": {"class_balance": "balanced_threshold"},
    "tau_0.8": {"fixmatch_threshold": 0.8},
    "ssl_epochs_3": {"ssl_epochs": 3},
    "ssl_epochs_5": {"ssl_epochs": 5},
    "ssl_epochs_20": {"ssl_epochs": 20},
    "fewshot_t_0.9": {"fewshot_threshold": 0.9},
    "fewshot_prior_relative": {"fewshot_threshold_mode": "prior_relative"},
    "prior_relative_t_0.8": {"fewshot_threshold_mode": "prior_relative", "fewshot_threshold": 0.8},
    "da+prior_relative": {"class_balance": "distribution_alignment", "fewshot_threshold_mode": "prior_relative"},
    "bt+t_0.9": {"class_balance": "balanced_threshold", "fewshot_threshold": 0.9},
    "ssl_epochs_3+t_0.9": {"ssl_epochs": 3, "fewshot_threshold": 0.9},
    "ssl_epochs_3+prior_relative_t_0.8": {
        "ssl_epochs": 3,
        "fewshot_threshold_mode": "prior_relative",
        "fewshot_threshold": 0.8,
    },
}

# how the report names each setting
LABELS: dict[str, str] = {
    "paper": "paper (t = 0.6)",
    "no_unlabeled_loss": "λ_u = 0 (no unlabeled loss)",
    "lambda_u_0.25": "λ_u = 0.25",
    "tau_0.8": "τ = 0.8",
    "ssl_epochs_3": "ssl_epochs 3",
    "ssl_epochs_5": "ssl_epochs 5",
    "ssl_epochs_20": "ssl_epochs 20",
    "fewshot_t_0.9": "few-shot t = 0.9",
    "fewshot_prior_relative": "prior_relative, t = 0.6",
    "prior_relative_t_0.8": "prior_relative, t = 0.8",
    "da+prior_relative": "DA + prior_relative",
    "bt+t_0.9": "balanced_threshold + t = 0.9",
    "ssl_epochs_3+t_0.9": "ssl_epochs 3 + t = 0.9",
    "ssl_epochs_3+prior_relative_t_0.8": "ssl_epochs 3 + prior_relative t = 0.8",
}


def class_map(clusters: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """cluster index -> class under the best one-to-one assignment (the temporary labels are k-means
    cluster numbers, named arbitrarily)."""
    counts = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(counts, (clusters, labels), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    mapping = np.empty(num_classes, dtype=np.int64)
    mapping[rows] = cols
    return mapping


def site_diagnostics(runtime: InspectableRuntime, table: SourceTable) -> dict[str, float]:
    aligned_truth = table.y(runtime.ids("aligned"))
    mapping = class_map(runtime.temporary_labels(), aligned_truth, 2)
    positive_cluster = int(np.flatnonzero(mapping == 1)[0])
    truth = table.y(runtime.ids("unaligned"))
    probs = runtime.oneshot_unaligned_probs
    predicted = mapping[probs.argmax(axis=1)]
    out = {
        "oneshot_mask_rate": runtime.oneshot_stats["pseudo_label_rate"],
        "oneshot_pred_pos_share": float(np.mean(predicted == 1)),
        "oneshot_local_auc": float(roc_auc_score(truth, probs[:, positive_cluster])),
    }
    p_hat = getattr(runtime, "fewshot_probs", None)
    if p_hat is not None and p_hat.sum() > 0:
        weights = p_hat / p_hat.sum()
        out.update(
            fewshot_chosen_share=float(p_hat.mean()),
            fewshot_chosen_true_pos=float(weights @ (truth == 1)),
            fewshot_pseudo_acc=float(weights @ (predicted == truth)),
            fewshot_pseudo_pos=float(weights @ (predicted == 1)),
            fewshot_pseudo_labeled=int(runtime.fewshot_stats["pseudo_labeled"]),
        )
    return out


def run_setting(
    name: str, overrides: dict[str, Any], overlap: int, seed: int, data_dir: Path, splits: Path, table: SourceTable
) -> dict:
    root = prepare_split(data_dir, overlap, seed, splits)
    record: dict[str, Any] = {"setting": name, "overrides": overrides, "overlap": overlap, "seed": seed}
    for algorithm in ("oneshot", "fewshot"):
        # each algorithm takes the settings it has: one-shot has no few-shot threshold
        known = {f.name for f in dataclasses.fields(get_algorithm(algorithm).Config)}
        applied = {k: v for k, v in overrides.items() if k in known}
        start = time.perf_counter()
        result, runtimes = run_vfl(
            make_config({**applied, "algorithm": algorithm, "seed": seed}), root, InspectableRuntime
        )
        record[algorithm] = {k: result["metrics"][k] for k in ("val_auc", "test_auc")}
        record[algorithm]["wall_s"] = round(time.perf_counter() - start, 2)
        if algorithm == "fewshot":
            per_site = [site_diagnostics(rt, table) for rt in runtimes.values()]
            # the mean over the sites only: the records stay small
            record["diagnostics"] = {k: round(float(np.mean([d[k] for d in per_site])), 5) for k in per_site[0]}
    return record


DIAG_COLUMNS = [
    ("oneshot_pred_pos_share", "pred pos"), ("oneshot_local_auc", "site AUC"), ("oneshot_mask_rate", "mask"),
    ("fewshot_chosen_share", "chosen"), ("fewshot_chosen_true_pos", "chosen pos"),
    ("fewshot_pseudo_acc", "PL acc"), ("fewshot_pseudo_pos", "PL pos"),
]  # fmt: skip


def table(records: list[dict]) -> str:
    """REPORT.md §2: per N_o and setting (in SETTINGS' order), mean ± std over seeds of the AUCs and the
    means of the sites' diagnostics."""
    groups: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for record in records:
        groups[(record["overlap"], record["setting"])].append(record)
    header = ["N_o", "setting", "one-shot val", "one-shot test", "few-shot val", "few-shot test"]
    header += [title for _, title in DIAG_COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (overlap, setting), rows in sorted(
        groups.items(), key=lambda kv: (kv[0][0], list(SETTINGS).index(kv[0][1]) if kv[0][1] in SETTINGS else 99)
    ):
        cells = [str(overlap), LABELS.get(setting, setting)]
        for algorithm in ("oneshot", "fewshot"):
            for metric in ("val_auc", "test_auc"):
                cells.append(mean_std([r[algorithm][metric] for r in rows]))
        for key, _ in DIAG_COLUMNS:
            values = [r["diagnostics"][key] for r in rows if key in r["diagnostics"]]
            cells.append(f"{np.mean(values):.2f}" if values else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@register_table("imbalance")
def committed_table() -> str:
    return table(read_jsonl(RESULTS))


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (named setting, N_o, seed) not yet in `out`, appended as each ends."""
    limit_threads()
    table_data = SourceTable(data_dir)
    env = environment_record()
    done = {(r["setting"], r["overlap"], r["seed"]) for r in read_jsonl(out)}
    for overlap in spec.settings["overlaps"]:
        for seed in spec.seeds:
            for name in spec.methods:
                if (name, overlap, seed) in done:
                    continue
                overrides = {**SWEEP_BASE, **SETTINGS[name]}
                record = run_setting(name, overrides, overlap, seed, data_dir, DEFAULT_SPLITS, table_data)
                append_jsonl(out, {**record, "env": env})
                print(name, overlap, seed, record["oneshot"], record["fewshot"], flush=True)


suite(
    Suite(
        name="imbalance",
        about="what moves FixMatch's majority-class collapse and few-shot's pseudo-label selection (REPORT.md §2)",
        runner=run,
        datasets=("credit_default",),
        methods=tuple(SETTINGS),
        settings={"overlaps": (1000, 2000)},
        records="imbalance.jsonl",
    )
)
