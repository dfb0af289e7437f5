"""Image halves (the one-shot VFL paper's setting, Table 1): vanilla VFL, FedBCD, one-shot, few-shot,
SS-VFL-C and SS-VFL-I on MNIST and CIFAR-10 cut into left/right halves for two sites, at reduced scale
on CPU; and the paper-scale run (CIFAR-10, WRN-28-2, full training set, on each site's GPU: device auto).

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

Shared work is computed once per (cell, seed) and reused; the tables mark it, and the "standalone"
wall time adds it back:
- SS-VFL-I and SS-VFL-C pretrain identically (`PretrainOnce` from the ssvfl suite);
- few-shot VFL's first round is one-shot VFL's local SSL. `TimedRuntime` keeps each site's state after
  the one-shot round, keyed by the settings, the encoder weights, the random state and the partial
  gradients received, so a hit is the same computation. Check (MNIST, N_o 256, seed 100, ssl_epochs 2):
  few-shot alone and few-shot after one-shot give identical metrics and communication.

With `--set job='{"KEY": VALUE}' --set variant=NAME` a follow-up runs other settings (applied to the methods
that have them), recorded apart, e.g. `--set job='{"ssl_epochs": 40}' --set variant=ssl40 --methods oneshot fewshot`.
The suite's datasets are cells DATASET:N_o (default: the scale's cells).

    vflflare bench run images --committed          # CPU scale, everything; resumes (finished runs are skipped)
    vflflare bench run images --datasets mnist:256 --seeds 0 --methods vanilla oneshot
    vflflare bench run images --committed --datasets mnist:1024 --seeds 0 --methods oneshot fewshot \
        --set replace=true                         # redo runs
    vflflare bench run images --set paper=true     # print the paper-scale commands (for a GPU machine)
    vflflare bench tables                          # IMAGES_REPORT.md's tables from the committed records
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import shlex
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vflflare.algorithms.oneshot import OneShotConfig
from vflflare.bench.inprocess import limit_threads
from vflflare.bench.paths import COMMITTED, REPO
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.stats import mean_std
from vflflare.bench.suite import Suite, suite
from vflflare.bench.suites.ssvfl import PretrainOnce, pretrain_key
from vflflare.bench.tables import table
from vflflare.data.loading import DataRequest, load_label_tables
from vflflare.data.split import parse_sites
from vflflare.data.split.dataset import split_dataset, synthetic_options
from vflflare.protocol.inprocess import InProcessTransport
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.setup import SERVER
from vflflare.registry import get_algorithm, make_config
from vflflare.tracking import LogTracker

RESULTS = COMMITTED / "images_cpu.jsonl"  # compact records: numbers and settings
SPLITS = Path("/tmp/vflflare-bench/image-splits")
SITES = ["site-1", "site-2"]
METHODS = ["vanilla", "fedbcd", "oneshot", "fewshot", "ssvfl_c", "ssvfl_i"]
LABELS = {
    "vanilla": "Vanilla VFL",
    "fedbcd": "FedBCD (Q 5)",
    "oneshot": "One-shot VFL",
    "fewshot": "Few-shot VFL",
    "ssvfl_c": "SS-VFL-C",
    "ssvfl_i": "SS-VFL-I",
}
FIXMATCH = {"oneshot", "fewshot"}
PRETRAINING = {"ssvfl_c", "ssvfl_i"}
# the ledger phases in which a site trains its f_k (the throughput columns)
TRAINING_PHASES = ("split_training", "local_ssl", "expanded_ssl", "local_pretraining")

# Scales: rows per split and the settings every run of the scale gets. Fixed a priori from the time
# budget (see IMAGES_REPORT.md, "Settings"), never from test accuracy.
SCALES: dict[str, dict[str, Any]] = {
    "cpu": {
        "cells": ["mnist:256", "mnist:1024", "cifar10:256"],
        "rows": {"mnist": (1500, 1000), "cifar10": (1500, 1000)},  # (--train-rows, --test-rows)
        "settings": {"image_model": {"name": "cnn", "width": 16}, "batch_size": 32, "lr": 0.01},
        "fixmatch": {"ssl_epochs": 20},
        "pretraining": {"pretrain_epochs": 5},
    },
    # The one-shot paper's Table 1: CIFAR-10 halves, full training (50 000) and test (10 000) sets,
    # WRN-28-2 ("WideResNet20" in the paper is no valid WRN depth; models/image.py), B 32, lr 0.01, Q 5.
    # Sites train on their GPU (device auto); the label party's heads on the representations stay on the CPU.
    "paper": {
        "cells": ["cifar10:256", "cifar10:512", "cifar10:1024", "cifar10:2048"],
        "rows": {"cifar10": (None, None)},
        # split NN as in Table 1: 1000 epochs without early stopping (8000 communications at N_o 256 =
        # 1000 epochs x 8 batches); the best validation epoch is still the model kept
        "settings": {
            "image_model": {"name": "wrn", "depth": 28, "widen_factor": 2},
            "batch_size": 32,
            "lr": 0.01,
            "split_epochs": 1000,
            "split_patience": 1000,
            "device": "auto",
        },
        "fixmatch": {"ssl_epochs": 40},
        "pretraining": {"pretrain_epochs": 200},  # SS-VFL paper: LocalCL for 200 epochs on images
        # Table 1's FedBCD: 1600 communications = the same 8000 local updates as vanilla, Q 5 per round trip
        "per_method": {"fedbcd": {"split_epochs": 200, "split_patience": 200}},
    },
}


def parse_cell(text: str) -> tuple[str, int]:
    dataset, _, overlap = text.partition(":")
    return dataset, int(overlap)


def method_settings(scale: str, method: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scale's settings for `method`, then those of `overrides` (the job setting) that the method has."""
    spec = SCALES[scale]
    extra = spec["fixmatch"] if method in FIXMATCH else spec["pretraining"] if method in PRETRAINING else {}
    known = {f.name for f in dataclasses.fields(get_algorithm(method).Config)}
    own = spec.get("per_method", {}).get(method, {})
    return {k: v for k, v in {**spec["settings"], **extra, **own, **(overrides or {})}.items() if k in known}


def split_args(scale: str, dataset: str, overlap: int, seed: int, data_dir: Path, out: Path) -> list[str]:
    train_rows, test_rows = SCALES[scale]["rows"][dataset]
    return [
        "split", "--dataset", dataset, "--data-dir", str(data_dir), "--sites", str(len(SITES)),
        "--overlap", str(overlap), "--seed", str(seed), "--out", str(out),
        *(["--train-rows", str(train_rows)] if train_rows else []),
        *(["--test-rows", str(test_rows)] if test_rows else []),
    ]  # fmt: skip


def split_dir(scale: str, dataset: str, overlap: int, seed: int, splits: Path) -> Path:
    train_rows, test_rows = SCALES[scale]["rows"][dataset]
    return splits / f"{dataset}_r{train_rows or 'all'}_t{test_rows or 'all'}_n{overlap}_s{seed}"


def prepare_image_split(
    scale: str, dataset: str, overlap: int, seed: int, data_dir: Path, splits: Path, label_owner: str | None = None
) -> Path:
    """`vflflare split` (split_args) once per argument set (bench.splits.prepare_split has no --train-rows /
    --test-rows); with `label_owner`, `--label-owner O --active-site-labels` in a folder of its own."""
    out = split_dir(scale, dataset, overlap, seed, splits)
    out = out.with_name(out.name + (f"_labels_{label_owner}_all" if label_owner else ""))
    if not (out / "manifest.json").exists():
        train_rows, test_rows = SCALES[scale]["rows"][dataset]
        try:
            split_dataset(
                dataset, str(data_dir), parse_sites(str(len(SITES))), overlap, seed, str(out),
                label_owner=label_owner or SERVER, active_site_labels=bool(label_owner),
                train_rows=train_rows or None, test_rows=test_rows or None,
                synthetic=synthetic_options(dataset, seed, None, None, None),
            )  # fmt: skip
        except ValueError as error:
            raise RuntimeError(
                f"vflflare split failed for {dataset}, overlap {overlap}, seed {seed}: {error}"
            ) from error
    return out


def _digest(*values: Any) -> str:
    hasher = hashlib.sha256()
    for value in values:
        hasher.update(np.ascontiguousarray(np.asarray(value)).tobytes())
    return hasher.hexdigest()


class TimedRuntime(PretrainOnce):
    """A site runtime that books, per ledger phase, the time spent inside its own task handler (the
    site's compute: augmentations, forwards, backwards; not the coordinator's head, not the message
    encoding) and the number of image views its f_k processed in training mode. In process the sites
    run one after the other, so a phase's wall time is about the sum of the sites' times.

    It also computes shared work once per (cell, seed): SS-VFL's pretraining (PretrainOnce) and the
    one-shot local SSL that few-shot VFL repeats as its first round. The latter is keyed by everything
    the round depends on (the one-shot settings, the party's encoder weights and random state before
    the round, and the partial gradients it received), so a hit reproduces the round exactly."""

    ledger: Any = None
    ssl_cache: dict[tuple, dict[str, Any]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seconds: dict[str, float] = defaultdict(float)
        self.images: dict[str, int] = defaultdict(int)
        self.ssl_reused = False
        self._hook: Any = None

    def _count(self, module: torch.nn.Module, inputs: Any, output: torch.Tensor) -> None:
        if module.training:
            self.images[self.ledger.current] += int(output.shape[0])

    def handle(self, task: str, payload: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            if task == "oneshot_update":
                return self._oneshot_update(payload)
            return super().handle(task, payload)
        finally:
            self.seconds[self.ledger.current] += time.perf_counter() - start
            if self.party is not None and self._hook is None:
                self._hook = self.party.encoder.register_forward_hook(self._count)

    def _oneshot_update(self, payload: dict[str, Any]) -> dict[str, Any]:
        party = self.party
        settings = {
            f.name: getattr(party.cfg, f.name) for f in dataclasses.fields(OneShotConfig) if f.name != "algorithm"
        }
        key = (
            self.site,
            str(self.data_root),
            json.dumps(settings, sort_keys=True, default=str),
            _digest(payload["grads"]),
            _digest(*[t.cpu().numpy() for t in party.encoder.state_dict().values()]),
            _digest(party.generator.get_state().numpy()),
        )
        if key in self.ssl_cache:
            copied = copy.deepcopy(self.ssl_cache[key])  # one deepcopy: the optimiser keeps pointing at the encoder
            for name, value in copied.items():
                party.state[name] = value
            self._hook = party.encoder.register_forward_hook(self._count)
            self.ssl_reused = True
            return party.representations(list(payload["represent"]))
        reply = super().handle("oneshot_update", payload)
        self._hook.remove()  # the cached copy must not carry this runtime's hook
        self.ssl_cache[key] = copy.deepcopy({name: party.state[name] for name in party.state})
        self._hook = party.encoder.register_forward_hook(self._count)
        return reply


def run_one(
    scale: str, dataset: str, overlap: int, seed: int, method: str, root: Path, overrides: dict[str, Any], variant: str
) -> dict[str, Any]:
    settings = method_settings(scale, method, overrides)
    cfg = make_config({**settings, "algorithm": method, "seed": seed})
    # everything the pretraining depends on (ssvfl.pretrain_key names the table model, not the image model)
    TimedRuntime.key = (
        (*pretrain_key(cfg, root), json.dumps(cfg.image_model, sort_keys=True)) if method in PRETRAINING else ()
    )
    cached = method in PRETRAINING and (SITES[0], *TimedRuntime.key) in TimedRuntime.cache
    runtimes = {s: TimedRuntime(s, str(root)) for s in SITES}
    net = InProcessTransport(runtimes, cfg.wire_dtype)
    for runtime in runtimes.values():
        runtime.ledger = net.ledger
    start = time.perf_counter()
    result = run_algorithm(
        net,
        cfg,
        lambda: load_label_tables(SERVER, DataRequest(SITES, str(root), cfg.seed)),
        LogTracker("vflflare.server"),
    )
    comm = result["communication"]
    return {
        "scale": scale, "variant": variant, "dataset": dataset, "overlap": overlap, "seed": seed, "method": method,
        "settings": settings, "metrics": result["metrics"], "rows": result["rows"],
        "per_site": comm["per_site"], "per_phase": comm["per_phase"],
        "expected_communication": result["expected_communication"],
        "phases": result["phases"],
        "site_seconds": {s: {k: round(v, 3) for k, v in r.seconds.items()} for s, r in runtimes.items()},
        "site_images": {s: dict(r.images) for s, r in runtimes.items()},
        "pretrain_cached": cached,
        "ssl_reused": all(r.ssl_reused for r in runtimes.values()),
        "training": {k: v for k, v in result["training"].items() if isinstance(v, (int, float, str))},
        "wall_s": round(time.perf_counter() - start, 1),
    }  # fmt: skip


# ------------------------------------------------------------------------------------------- tables
def per_site_mean(record: dict, key: str) -> float:
    return float(np.mean([record["per_site"][s][key] for s in SITES]))


def training_mb(record: dict) -> float:
    """Payload MB per site without the test rows' representations (inference, not training: every
    method uploads them once, rep_dim float32 per row)."""
    rep_dim = record["settings"].get("rep_dim", 32)
    return (per_site_mean(record, "payload_bytes") - record["rows"]["test"] * rep_dim * 4) / 1e6


def phase_wall(record: dict) -> dict[str, float]:
    walls: dict[str, float] = defaultdict(float)
    for entry in record["phases"]:
        walls[entry["name"]] += entry["wall_s"]
    return walls


def throughput(record: dict, phase: str) -> float | None:
    """Training image views per second of one site's own compute in `phase`, mean over the sites."""
    rates = [
        record["site_images"][s].get(phase, 0) / record["site_seconds"][s][phase]
        for s in SITES
        if record["site_images"][s].get(phase) and record["site_seconds"][s].get(phase)
    ]
    return float(np.mean(rates)) if rates else None


def reused_phase(rows: list[dict]) -> tuple[str, str] | None:
    """(phase, method it was computed by) when these runs reused shared work."""
    if any(r.get("pretrain_cached") for r in rows):
        return "local_pretraining", "ssvfl_c"
    if any(r.get("ssl_reused") for r in rows):
        return "local_ssl", "oneshot"
    return None


def standalone_wall(record: dict, records: list[dict]) -> float:
    """The run's wall time as if it had computed its reused phase itself: plus that phase's wall time
    in the run of the same (scale, dataset, N_o, seed) that computed it."""
    reused = reused_phase([record])
    if reused is None:
        return record["wall_s"]
    phase, method = reused
    key = lambda r: (r["scale"], r.get("variant", "default"), r["dataset"], r["overlap"], r["seed"])  # noqa: E731
    donors = [r for r in records if r["method"] == method and key(r) == key(record)]
    return (
        record["wall_s"]
        - phase_wall(record).get(phase, 0.0)
        + (phase_wall(donors[0]).get(phase, 0.0) if donors else np.nan)
    )


def _fmt(values: list[float], digits: int) -> str:
    return "-" if not values else f"{np.median(values):.{digits}f}"


def tables(records: list[dict]) -> str:
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r["scale"], r.get("variant", "default"), r["dataset"], r["overlap"])][r["method"]].append(r)
    order = lambda key: (key[0], key[1], key[2] != "mnist", key[2], key[3])  # noqa: E731
    main = [
        "| scale / variant | dataset | N_o | method | test acc | val acc | comms / site (up + down) | payload "
        "MB / site "
        "| of it training MB | wire MB / site | wall s (standalone) | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    seeds = sorted({r["seed"] for r in records})
    per_seed = [
        "| dataset | N_o | method | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|---|---|" + "---|" * len(seeds),
    ]
    phases = [
        "| dataset | N_o | method | phase wall times, s (median over seeds) | training images / s / site |",
        "|---|---|---|---|---|",
    ]
    for key in sorted(groups, key=order):
        scale, variant, dataset, overlap = key
        for method in METHODS:
            rows = groups[key].get(method, [])
            if not rows:
                continue
            ups = _fmt([per_site_mean(r, "uploads") for r in rows], 0)
            downs = _fmt([per_site_mean(r, "downloads") for r in rows], 0)
            comms = _fmt([per_site_mean(r, "uploads") + per_site_mean(r, "downloads") for r in rows], 0)
            main.append(
                f"| {scale}{'' if variant == 'default' else ' / ' + variant} | {dataset} | {overlap} | "
                f"{LABELS[method]} "
                f"| {mean_std([r['metrics']['test_accuracy'] for r in rows])} "
                f"| {mean_std([r['metrics']['val_accuracy'] for r in rows])} "
                f"| {comms} ({ups} + {downs}) "
                f"| {mean_std([per_site_mean(r, 'payload_bytes') / 1e6 for r in rows], 3)} "
                f"| {np.mean([training_mb(r) for r in rows]):.3f} "
                f"| {np.mean([per_site_mean(r, 'wire_bytes') / 1e6 for r in rows]):.3f} "
                f"| {_fmt([standalone_wall(r, records) for r in rows], 0)} | "
                f"{','.join(str(r['seed']) for r in sorted(rows, key=lambda r: r['seed']))} |"
            )
            by_seed = {r["seed"]: r["metrics"]["test_accuracy"] for r in rows}
            per_seed.append(
                f"| {dataset} | {overlap} | {LABELS[method]} | "
                + " | ".join(f"{by_seed[s]:.3f}" if s in by_seed else "-" for s in seeds)
                + " |"
            )
            names = list(dict.fromkeys(e["name"] for r in rows for e in r["phases"]))
            walls = [phase_wall(r) for r in rows]
            reused = reused_phase(rows)
            cells = []
            for name in names:
                cell = f"{name} {np.median([w.get(name, 0.0) for w in walls]):.1f}"
                if reused and name == reused[0]:
                    cell += f" (reused from {LABELS[reused[1]]})"
                cells.append(cell)
            rates = []
            for name in TRAINING_PHASES:
                values = [v for v in (throughput(r, name) for r in rows) if v is not None]
                if values and not (reused and name == reused[0]):
                    rates.append(f"{name} {np.median(values):.0f}")
            phases.append(
                f"| {dataset} | {overlap} | {LABELS[method]} | {', '.join(cells)} | {', '.join(rates) or '-'} |"
            )
    return "\n\n".join(
        [
            "Accuracy (mean ± std over seeds) and communication per site (comms: median over seeds; MB: mean; "
            "training MB = payload without the test rows' representations; wall: median)",
            "\n".join(main),
            "Test accuracy per seed (split seed = job seed)",
            "\n".join(per_seed),
            "Wall time per ledger phase and training throughput (image views through f_k in training mode per "
            "second of the site's own compute, mean of the two sites, median over seeds)",
            "\n".join(phases),
        ]
    )


# ------------------------------------------------------------------------------------------- paper
def _shown(path: Path) -> str:
    """A path as the commands (run from the repository root) should spell it."""
    try:
        return os.path.relpath(path, REPO)
    except ValueError:
        return str(path)


def paper_commands(data_dir: Path, splits: Path) -> str:
    lines = [
        "# Paper scale (one-shot VFL, Table 1): CIFAR-10 halves, all 50 000 training and 10 000 test images,",
        "# WRN-28-2, B 32, lr 0.01, FedBCD Q 5, each site's model on the GPU (device auto). Splits:",
    ]
    for cell in SCALES["paper"]["cells"]:
        dataset, overlap = parse_cell(cell)
        for seed in (0, 1, 2):
            out = split_dir("paper", dataset, overlap, seed, splits)
            lines.append(
                ".venv/bin/vflflare "
                + shlex.join(split_args("paper", dataset, overlap, seed, Path(_shown(data_dir)), out))
            )
    lines += ["# Settings per method (JSON, passed to make_config / `vflflare jobs --set`):"]
    for method in METHODS:
        lines.append(f"#   {method}: {json.dumps(method_settings('paper', method))}")
    lines += [
        "# The benchmark (resumable; on a machine with a CUDA build of torch):",
        ".venv/bin/vflflare bench run images --set scale=paper --out benchmarks/runs/images_paper.jsonl",
    ]
    return "\n".join(lines)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (cell, seed, method) of the scale not yet in `out` (with `replace`: the selected ones again)."""
    settings = spec.settings
    scale, variant = settings["scale"], settings["variant"]
    if settings["paper"]:
        print(paper_commands(data_dir, SPLITS))
        return
    limit_threads()
    overrides = dict(settings["job"])
    if overrides and variant == "default":
        raise ValueError("job overrides need --set variant=NAME, so the runs are not mixed with the default ones")
    cells = [parse_cell(c) for c in spec.datasets or SCALES[scale]["cells"]]
    chosen = {(scale, variant, c, seed, m) for c in cells for seed in spec.seeds for m in spec.methods}

    def selected(r: dict) -> bool:
        return (r["scale"], r.get("variant", "default"), (r["dataset"], r["overlap"]), r["seed"], r["method"]) in chosen

    if settings["replace"] and out.exists():
        kept = [r for r in read_jsonl(out) if not selected(r)]
        out.write_text("".join(json.dumps(r) + "\n" for r in kept))
    done = {
        (r["scale"], r.get("variant", "default"), r["dataset"], r["overlap"], r["seed"], r["method"])
        for r in read_jsonl(out)
    }
    started = time.perf_counter()
    for dataset, overlap in cells:
        for seed in spec.seeds:
            todo = [m for m in spec.methods if (scale, variant, dataset, overlap, seed, m) not in done]
            if not todo:
                continue
            root = prepare_image_split(scale, dataset, overlap, seed, data_dir, SPLITS)
            for method in todo:
                record = run_one(scale, dataset, overlap, seed, method, root, overrides, variant)
                record["env"] = environment_record()
                append_jsonl(out, record)
                print(
                    f"[{time.perf_counter() - started:7.0f} s] {dataset} N_o {overlap} seed {seed} {method}: "
                    f"test acc {record['metrics']['test_accuracy']:.4f}, "
                    f"{per_site_mean(record, 'payload_bytes') / 1e6:.3f} MB/site, {record['wall_s']} s",
                    flush=True,
                )
            TimedRuntime.cache.clear()  # one (cell, seed) at a time: the cached states are not needed again
            TimedRuntime.ssl_cache.clear()


@table("images")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="images",
        about="image halves (the one-shot paper's Table 1) in process, at CPU scale or paper scale (IMAGES_REPORT.md)",
        runner=run,
        datasets=(),  # cells DATASET:N_o; none named: the scale's cells
        methods=tuple(METHODS),
        seeds=(0, 1, 2),
        settings={
            "scale": "cpu",  # one of SCALES
            "variant": "default",  # the name job overrides are recorded under
            "job": {},  # config overrides, applied to the methods that have the setting
            "replace": False,  # drop the selected runs from the records and run them again
            "paper": False,  # only print the paper-scale commands
        },
        records="images_cpu.jsonl",
    )
)
