"""Image halves (the one-shot VFL paper's setting, Table 1): vanilla VFL, FedBCD, one-shot, few-shot,
SS-VFL-C and SS-VFL-I on MNIST and CIFAR-10 cut into left/right halves for two sites, at reduced scale
on CPU; the paper-scale command (CIFAR-10, WRN-28-2, full training set) is held ready but not run.

Cells (dataset, N_o) at CPU scale: MNIST N_o 256 and 1024, CIFAR-10 N_o 256, seeds 0-2 (split seed =
job seed: each seed is a fresh draw of the image subset, of the N_o aligned images and of the test
images). Each split is `vflflare split --dataset D --sites 2 --overlap N_o --seed S --train-rows R
--test-rows T`. Every run goes through the in-process driver (the NVFlare jobs' phases, payload
encoding and ledger), bottom model `image_model` = the small CNN, B 32, lr 0.01, package defaults
except the settings in SCALES (chosen once, before any accuracy was seen: IMAGES_REPORT.md says why).

Per run the record holds the test/validation accuracy, communications and payload per site, the wall
time of every ledger phase, and per site and phase the site's own compute time and the number of
image views its bottom model f_k processed in training mode (augmented views included), from which
the tables give the training throughput in images/s per site.

SS-VFL-I and SS-VFL-C pretrain identically for a given (cell, seed): the encoders are pretrained once
per (cell, seed) and reused (`PretrainOnce` from ssvfl.py), so SS-VFL-I's pretraining time is
SS-VFL-C's (the table marks it).

    cd benchmarks
    ../.venv/bin/python images.py                    # CPU scale, everything; resumes (finished runs are skipped)
    ../.venv/bin/python images.py --cells mnist:256 --seeds 0 --methods vanilla oneshot
    ../.venv/bin/python images.py --table            # Markdown tables of the results file
    ../.venv/bin/python images.py --paper            # print the paper-scale commands (not run: needs a GPU build)
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common import DEFAULT_DATA_DIR, RUNS, append_jsonl, environment, limit_threads, mean_std, read_jsonl
from ssvfl import PretrainOnce, pretrain_key
from vflflare import cli
from vflflare.algorithms.registry import make_config
from vflflare.data.loading import load_label_tables
from vflflare.protocol.inprocess import InProcessTransport
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.setup import SERVER
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.tracking import LogTracker

RESULTS = RUNS / "images.jsonl"
SPLITS = Path("/tmp/vflflare-bench/image-splits")
SITES = ["site-1", "site-2"]
METHODS = ["vanilla", "fedbcd", "oneshot", "fewshot", "ssvfl_c", "ssvfl_i"]
LABELS = {"vanilla": "Vanilla VFL", "fedbcd": "FedBCD (Q 5)", "oneshot": "One-shot VFL", "fewshot": "Few-shot VFL",
          "ssvfl_c": "SS-VFL-C", "ssvfl_i": "SS-VFL-I"}
FIXMATCH = {"oneshot", "fewshot"}
PRETRAINING = {"ssvfl_c", "ssvfl_i"}
# the ledger phases in which a site trains its f_k (the throughput columns)
TRAINING_PHASES = ("split_training", "local_ssl", "expanded_ssl", "local_pretraining")

# Scales: rows per split and the settings every run of the scale gets. Fixed a priori from the time
# budget (see IMAGES_REPORT.md, "Settings"), never from test accuracy.
SCALES: dict[str, dict[str, Any]] = {
    "cpu": {
        "cells": ["mnist:256", "mnist:1024", "cifar10:256"],
        "rows": {"mnist": (2000, 1000), "cifar10": (2000, 1000)},  # (--train-rows, --test-rows)
        "settings": {"image_model": {"name": "cnn"}, "batch_size": 32, "lr": 0.01},
        "fixmatch": {"ssl_epochs": 30},
        "pretraining": {"pretrain_epochs": 10},
    },
    # The one-shot paper's Table 1: CIFAR-10 halves, full training (50 000) and test (10 000) sets,
    # WRN-28-2 ("WideResNet20" in the paper is no valid WRN depth; models/image.py), B 32, lr 0.01, Q 5.
    # Needs a GPU build of the training loops (vflflare trains on CPU only); not run.
    "paper": {
        "cells": ["cifar10:256", "cifar10:512", "cifar10:1024", "cifar10:2048"],
        "rows": {"cifar10": (None, None)},
        "settings": {"image_model": {"name": "wrn", "depth": 28, "widen_factor": 2}, "batch_size": 32, "lr": 0.01},
        "fixmatch": {"ssl_epochs": 40},
        "pretraining": {"pretrain_epochs": 200},  # SS-VFL paper: LocalCL for 200 epochs on images
    },
}


def parse_cell(text: str) -> tuple[str, int]:
    dataset, _, overlap = text.partition(":")
    return dataset, int(overlap)


def method_settings(scale: str, method: str) -> dict[str, Any]:
    spec = SCALES[scale]
    extra = spec["fixmatch"] if method in FIXMATCH else spec["pretraining"] if method in PRETRAINING else {}
    return {**spec["settings"], **extra}


def split_args(scale: str, dataset: str, overlap: int, seed: int, data_dir: Path, out: Path) -> list[str]:
    train_rows, test_rows = SCALES[scale]["rows"][dataset]
    return [
        "split", "--dataset", dataset, "--data-dir", str(data_dir), "--sites", str(len(SITES)),
        "--overlap", str(overlap), "--seed", str(seed), "--out", str(out),
        *(["--train-rows", str(train_rows)] if train_rows else []), *(["--test-rows", str(test_rows)] if test_rows else []),
    ]  # fmt: skip


def split_dir(scale: str, dataset: str, overlap: int, seed: int, splits: Path) -> Path:
    train_rows, test_rows = SCALES[scale]["rows"][dataset]
    return splits / f"{dataset}_r{train_rows or 'all'}_t{test_rows or 'all'}_n{overlap}_s{seed}"


def prepare_image_split(scale: str, dataset: str, overlap: int, seed: int, data_dir: Path, splits: Path) -> Path:
    """`vflflare split` once per argument set (common.prepare_split has no --train-rows / --test-rows)."""
    out = split_dir(scale, dataset, overlap, seed, splits)
    if not (out / "manifest.json").exists():
        if cli.main(split_args(scale, dataset, overlap, seed, data_dir, out)) != 0:
            raise RuntimeError(f"vflflare split failed for {dataset}, overlap {overlap}, seed {seed}")
    return out


class TimedRuntime(PretrainOnce):
    """A site runtime that books, per ledger phase, the time spent inside its own task handler (the
    site's compute: augmentations, forwards, backwards; not the coordinator's head, not the message
    encoding) and the number of image views its f_k processed in training mode. In process the sites
    run one after the other, so a phase's wall time is about the sum of the sites' times."""

    ledger: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seconds: dict[str, float] = defaultdict(float)
        self.images: dict[str, int] = defaultdict(int)
        self._hooked = False

    def _count(self, module: torch.nn.Module, inputs: Any, output: torch.Tensor) -> None:
        if module.training:
            self.images[self.ledger.current] += int(output.shape[0])

    def handle(self, task: str, payload: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            return super().handle(task, payload)
        finally:
            self.seconds[self.ledger.current] += time.perf_counter() - start
            if self.party is not None and not self._hooked:
                self.party.encoder.register_forward_hook(self._count)
                self._hooked = True


def run_one(scale: str, dataset: str, overlap: int, seed: int, method: str, root: Path) -> dict[str, Any]:
    cfg = make_config({**method_settings(scale, method), "algorithm": method, "seed": seed})
    # everything the pretraining depends on (ssvfl.pretrain_key names the table model, not the image model)
    TimedRuntime.key = (*pretrain_key(cfg, root), json.dumps(cfg.image_model, sort_keys=True)) if method in PRETRAINING else ()
    cached = method in PRETRAINING and (SITES[0], *TimedRuntime.key) in TimedRuntime.cache
    runtimes = {s: TimedRuntime(s, str(root)) for s in SITES}
    net = InProcessTransport(runtimes, fp16=cfg.fp16)
    for runtime in runtimes.values():
        runtime.ledger = net.ledger
    start = time.perf_counter()
    result = run_algorithm(net, cfg, lambda: load_label_tables(SERVER, SITES, str(root), cfg.seed),
                           LogTracker("vflflare.server"))
    comm = result["communication"]
    return {
        "scale": scale, "dataset": dataset, "overlap": overlap, "seed": seed, "method": method,
        "settings": method_settings(scale, method), "metrics": result["metrics"], "rows": result["rows"],
        "per_site": comm["per_site"], "per_phase": comm["per_phase"],
        "expected_communication": result["expected_communication"],
        "phases": result["phases"],
        "site_seconds": {s: {k: round(v, 3) for k, v in r.seconds.items()} for s, r in runtimes.items()},
        "site_images": {s: dict(r.images) for s, r in runtimes.items()},
        "pretrain_cached": cached,
        "training": {k: v for k, v in result["training"].items() if isinstance(v, (int, float, str))},
        "wall_s": round(time.perf_counter() - start, 1),
    }  # fmt: skip


# ------------------------------------------------------------------------------------------- tables
def per_site_mean(record: dict, key: str) -> float:
    return float(np.mean([record["per_site"][s][key] for s in SITES]))


def phase_wall(record: dict) -> dict[str, float]:
    walls: dict[str, float] = defaultdict(float)
    for entry in record["phases"]:
        walls[entry["name"]] += entry["wall_s"]
    return walls


def throughput(record: dict, phase: str) -> float | None:
    """Training image views per second of one site's own compute in `phase`, mean over the sites."""
    rates = [record["site_images"][s].get(phase, 0) / record["site_seconds"][s][phase]
             for s in SITES if record["site_images"][s].get(phase) and record["site_seconds"][s].get(phase)]
    return float(np.mean(rates)) if rates else None


def _fmt(values: list[float], digits: int) -> str:
    return "-" if not values else f"{np.median(values):.{digits}f}"


def tables(records: list[dict]) -> str:
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r["scale"], r["dataset"], r["overlap"])][r["method"]].append(r)
    order = lambda key: (key[0], key[1] != "mnist", key[1], key[2])  # noqa: E731
    main = ["| scale | dataset | N_o | method | test acc | val acc | comms / site (up + down) | payload MB / site "
            "| wire MB / site | wall s | seeds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    phases = ["| dataset | N_o | method | phase wall times, s (median over seeds) | training images / s / site |",
              "|---|---|---|---|---|"]
    for key in sorted(groups, key=order):
        scale, dataset, overlap = key
        for method in METHODS:
            rows = groups[key].get(method, [])
            if not rows:
                continue
            ups = _fmt([per_site_mean(r, "uploads") for r in rows], 0)
            downs = _fmt([per_site_mean(r, "downloads") for r in rows], 0)
            comms = _fmt([per_site_mean(r, "uploads") + per_site_mean(r, "downloads") for r in rows], 0)
            main.append(
                f"| {scale} | {dataset} | {overlap} | {LABELS[method]} "
                f"| {mean_std([r['metrics']['test_accuracy'] for r in rows])} "
                f"| {mean_std([r['metrics']['val_accuracy'] for r in rows])} "
                f"| {comms} ({ups} + {downs}) "
                f"| {mean_std([per_site_mean(r, 'payload_bytes') / 1e6 for r in rows], 3)} "
                f"| {_fmt([per_site_mean(r, 'wire_bytes') / 1e6 for r in rows], 3)} "
                f"| {_fmt([r['wall_s'] for r in rows], 0)} | {','.join(str(r['seed']) for r in sorted(rows, key=lambda r: r['seed']))} |"
            )
            names = list(dict.fromkeys(e["name"] for r in rows for e in r["phases"]))
            walls = [phase_wall(r) for r in rows]
            cached = any(r.get("pretrain_cached") for r in rows)
            cells = []
            for name in names:
                cell = f"{name} {np.median([w.get(name, 0.0) for w in walls]):.1f}"
                if name == "local_pretraining" and cached:
                    cell += " (reused from SS-VFL-C)"
                cells.append(cell)
            rates = []
            for name in TRAINING_PHASES:
                values = [v for v in (throughput(r, name) for r in rows) if v is not None]
                if values and not (name == "local_pretraining" and cached):
                    rates.append(f"{name} {np.median(values):.0f}")
            phases.append(f"| {dataset} | {overlap} | {LABELS[method]} | {', '.join(cells)} | {', '.join(rates) or '-'} |")
    return "\n\n".join([
        "Accuracy (mean ± std over seeds) and communication per site (median over seeds; payload mean ± std)",
        "\n".join(main),
        "Wall time per ledger phase and training throughput (image views through f_k in training mode per "
        "second of the site's own compute, mean of the two sites, median over seeds)",
        "\n".join(phases),
    ])


# ------------------------------------------------------------------------------------------- paper
def paper_commands(data_dir: Path, splits: Path) -> str:
    lines = ["# Paper scale (one-shot VFL, Table 1): CIFAR-10 halves, all 50 000 training and 10 000 test images,",
             "# WRN-28-2, B 32, lr 0.01, FedBCD Q 5. NOT RUN: vflflare trains on CPU only (no CUDA placement);",
             "# these commands need a GPU build of the training loops. Splits:"]
    for cell in SCALES["paper"]["cells"]:
        dataset, overlap = parse_cell(cell)
        for seed in (0, 1, 2):
            out = split_dir("paper", dataset, overlap, seed, splits)
            lines.append(".venv/bin/vflflare " + shlex.join(split_args("paper", dataset, overlap, seed, data_dir, out)))
    lines += ["# Settings per method (JSON, passed to make_config / `vflflare jobs --set`):"]
    for method in METHODS:
        lines.append(f"#   {method}: {method_settings('paper', method)}")
    lines += ["# The benchmark (resumable; refuses to start without --force while the loops are CPU-only):",
              "cd benchmarks && ../.venv/bin/python images.py --scale paper --out runs/images_paper.jsonl --force"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="cpu", choices=list(SCALES))
    parser.add_argument("--cells", nargs="+", help="dataset:N_o (default: the scale's cells)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--splits", type=Path, default=SPLITS, help="where the split folders go")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON lines; existing runs are skipped")
    parser.add_argument("--table", action="store_true", help="only print the tables of --out")
    parser.add_argument("--paper", action="store_true", help="only print the paper-scale commands")
    parser.add_argument("--force", action="store_true", help="run --scale paper although training is CPU-only")
    args = parser.parse_args()
    if args.paper:
        print(paper_commands(args.data_dir, args.splits))
        return
    if args.table:
        print(tables(read_jsonl(args.out)))
        return
    if args.scale == "paper" and not args.force:
        sys.exit("--scale paper: vflflare's training loops run on CPU only; the paper-scale table needs a GPU build "
                 "(see --paper). --force runs it on CPU anyway (weeks).")
    limit_threads()
    done = {(r["scale"], r["dataset"], r["overlap"], r["seed"], r["method"]) for r in read_jsonl(args.out)}
    started = time.perf_counter()
    for cell in args.cells or SCALES[args.scale]["cells"]:
        dataset, overlap = parse_cell(cell)
        for seed in args.seeds:
            todo = [m for m in args.methods if (args.scale, dataset, overlap, seed, m) not in done]
            if not todo:
                continue
            root = prepare_image_split(args.scale, dataset, overlap, seed, args.data_dir, args.splits)
            for method in todo:
                record = run_one(args.scale, dataset, overlap, seed, method, root)
                record["env"] = environment()
                append_jsonl(args.out, record)
                print(f"[{time.perf_counter() - started:7.0f} s] {dataset} N_o {overlap} seed {seed} {method}: "
                      f"test acc {record['metrics']['test_accuracy']:.4f}, "
                      f"{per_site_mean(record, 'payload_bytes') / 1e6:.3f} MB/site, {record['wall_s']} s", flush=True)
            TimedRuntime.cache.clear()  # one (cell, seed) at a time: the pretrained encoders are not needed again
    print(tables(read_jsonl(args.out)))


if __name__ == "__main__":
    main()
