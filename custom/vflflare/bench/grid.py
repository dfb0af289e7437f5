"""`vflflare bench`: every tabular algorithm and baseline on one grid of splits (datasets x overlaps x
seeds), one record per (method, split) in a JSON-lines file; report.py turns them into the leaderboard.

Every split is `vflflare split --dataset D --overlap N --seed s --label-owner <first site>
--active-site-labels`: the labels at a site (NVFlare's vertical XGBoost needs that; VFLHLP's active
party holds the labels of its own rows as well). The VFL methods run at their package defaults with
`seed = s`, in process or (`sim`) as NVFlare simulator jobs, which give the same numbers.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.bench import folder
from vflflare.bench.baselines import TUNED_GRID, AlignedSplit, central, fit_logreg, fit_xgboost, label_local
from vflflare.bench.paths import needs_data_dir, resolve_data_dir
from vflflare.bench.provenance import environment, git_state
from vflflare.bench.records import read_jsonl
from vflflare.bench.vertical_xgb import run_on_split
from vflflare.data.loading import DataRequest, load_label_tables
from vflflare.data.split import parse_sites
from vflflare.data.split.dataset import split_dataset
from vflflare.metrics import score
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.model_store import LABEL_DIR, models_dir, read_predictions
from vflflare.registry import get_algorithm, make_config
from vflflare.simulation import simulate

# method -> the job's settings (package defaults otherwise)
VFL_METHODS: dict[str, dict[str, Any]] = {
    "vanilla": {"algorithm": "vanilla"},
    "FedBCD": {"algorithm": "fedbcd"},
    "one-shot": {"algorithm": "oneshot"},
    "few-shot": {"algorithm": "fewshot"},
    "few-shot + finetune": {"algorithm": "fewshot", "finetune_epochs": 100},  # stops early on validation
    "SS-VFL-I": {"algorithm": "ssvfl_i"},
    "SS-VFL-C": {"algorithm": "ssvfl_c"},
    "FedHSSL": {"algorithm": "fedhssl", "global_iterations": 10},  # as in FEDHSSL_REPORT (40 is 4x the CPU)
    "VFLHLP": {"algorithm": "vflhlp"},
}
LABEL_ALONE_ALIGNED, LABEL_ALONE_ALL = (
    "label party alone (XGBoost, aligned rows)",
    "label party alone (XGBoost, all its labels)",
)
VERTICAL_XGB = "vertical XGBoost (NVFlare)"
# the fair comparison's trees (LEADERBOARD.md, issue 26): TUNED_GRID, chosen on validation only
TUNED, LABEL_ALONE_TUNED = "central XGBoost, tuned", "label party alone (XGBoost, all its labels), tuned"
BASELINES = (
    VERTICAL_XGB,
    "central XGBoost",
    TUNED,
    "central LR",
    LABEL_ALONE_ALIGNED,
    LABEL_ALONE_ALL,
    LABEL_ALONE_TUNED,
)
BASELINE_SETTINGS = ("numeric_transform", "val_fraction")  # the job settings the baselines follow too
METHODS = (*VFL_METHODS, *BASELINES)


@dataclass
class BenchSpec:
    datasets: list[str] = field(default_factory=lambda: ["credit_default"])
    overlaps: list[int] = field(default_factory=lambda: [500, 1000, 2000])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    sites: int = 2
    sim: bool = False
    data_dir: str | None = None
    workers: int = 1  # splits run side by side, each in its own process
    # extra job settings, for every VFL method whose config has the key (a key none has is an error)
    settings: dict[str, Any] = field(default_factory=dict)
    # each VFL method's test scores averaged over this many runs, with job seeds s, s + ENSEMBLE_SEED_STEP,
    # ... on the same split (in process only); traffic is the members' sum
    ensemble: int = 1

    def settings_for(self, method: str) -> dict[str, Any]:
        known = {f.name for f in fields(get_algorithm(VFL_METHODS[method]["algorithm"]).Config)}
        return {k: v for k, v in self.settings.items() if k in known}

    def folder_settings(self) -> dict[str, Any]:
        """What the numbers depend on besides the grid cell (bench.json; every record carries it too)."""
        return {k: getattr(self, k) for k in folder.KEYS}

    def job_settings(self, method: str) -> dict[str, Any]:
        """The settings `method` runs with, beyond its seeds and sites: the job's, or the baselines' share."""
        if method in VFL_METHODS:
            return {**VFL_METHODS[method], **self.settings_for(method)}
        return {k: v for k, v in self.settings.items() if k in BASELINE_SETTINGS}

    def job_seeds(self, method: str, seed: int) -> list[int]:
        """One per ensemble member. The baselines get the VFL methods' treatment: a member per job seed,
        each on that seed's validation rows; NVFlare's vertical XGBoost (a simulator run) runs once."""
        members = 1 if method == VERTICAL_XGB else self.ensemble
        return [seed + ENSEMBLE_SEED_STEP * j for j in range(members)]

    def check(self) -> None:
        if self.ensemble < 1 or (self.ensemble > 1 and self.sim):
            raise ValueError(f"ensemble must be >= 1, and 1 with --sim (members run in process); got {self.ensemble}")
        resolve_data_dir(self.data_dir, required=needs_data_dir(self.datasets))  # before any run: named, a folder
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {list(METHODS)}")
        vfl = [m for m in self.methods if m in VFL_METHODS]
        used = {k for m in vfl for k in self.settings_for(m)}
        if any(m in BASELINES for m in self.methods):
            used |= set(BASELINE_SETTINGS)
        unused = set(self.settings) - used
        if unused:
            raise ValueError(f"no method of this bench has the settings {sorted(unused)}")


def split_for(spec: BenchSpec, out: Path, dataset: str, overlap: int, seed: int) -> Path:
    sites = parse_sites(str(spec.sites))
    root = out / "splits" / f"{dataset}_k{spec.sites}_n{overlap}_s{seed}"
    if not (root / "manifest.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        split_dataset(
            dataset,
            resolve_data_dir(spec.data_dir, required=needs_data_dir([dataset])),
            sites,
            overlap,
            seed,
            str(root),
            label_owner=sites[0],
            active_site_labels=True,
        )
    return root


def run_vfl(spec: BenchSpec, method: str, root: Path, seed: int, work: Path, runs: Path | None = None) -> dict:
    """One run of `method` on the split at `root`; runs: where the parties save their models (in process)."""
    if spec.ensemble > 1:
        return run_ensemble(spec, method, root, seed, work)
    sites = parse_sites(str(spec.sites))
    settings = {**VFL_METHODS[method], **spec.settings_for(method), "seed": seed, "label_owner": sites[0]}
    if spec.sim:
        from vflflare.jobs import write_job

        job = write_job(work / "jobs", "bench", settings, min_sites=len(sites))
        result = simulate(str(job), str(work / "ws"), len(sites), len(sites), str(root))
    else:
        result = run_inprocess(make_config(settings), sites, str(root), runs_root=str(runs) if runs else None)
    if "error" in result:
        raise RuntimeError(f"{method} on {root.name}: {result['error']}")
    comm = result["communication"]["per_site"]
    return {
        "metrics": result["metrics"],
        **({"job_id": result["job_id"]} if runs else {}),
        "mb_per_site": max(c["payload_bytes"] for c in comm.values()) / 1e6,
        "comms_per_site": max(c["uploads"] + c["downloads"] for c in comm.values()),
    }


ENSEMBLE_SEED_STEP = 1000


def run_ensemble(spec: BenchSpec, method: str, root: Path, seed: int, work: Path) -> dict:
    """`spec.ensemble` runs of `method` whose test scores (each run's saved test_predictions.csv) are
    averaged; each member selects its own model on its own validation rows, so the test rows choose
    nothing. Reports the ensemble's test metric and the members' median validation metric."""
    single = BenchSpec(**{**asdict(spec), "ensemble": 1})
    owner = parse_sites(str(spec.sites))[0]
    members, scores = [], []
    for j, job_seed in enumerate(spec.job_seeds(method, seed)):
        runs = work / f"member{j}"
        member = run_vfl(single, method, root, job_seed, runs, runs)
        saved = models_dir(runs / owner, member.pop("job_id")) / LABEL_DIR
        members.append(member)
        scores.append(read_predictions(saved / "test_predictions.csv"))
    request = DataRequest(parse_sites(str(spec.sites)), str(root), seed)
    labels = load_label_tables(owner, request, active_site_labels=True)
    truth = dict(zip(labels.test_ids, labels.test_labels.tolist()))
    name, value = ensemble_metric(scores, truth, labels.num_classes)
    val = [m["metrics"][f"val_{name}"] for m in members]
    return {
        "metrics": {f"test_{name}": value, f"val_{name}": float(np.median(val))},
        "members": [m["metrics"] for m in members],
        "mb_per_site": sum(m["mb_per_site"] for m in members),
        "comms_per_site": sum(m["comms_per_site"] for m in members),
    }


def ensemble_metric(scores: list[dict[str, list[float]]], truth: dict[str, int], num_classes: int) -> tuple[str, float]:
    """The metric of the members' averaged class scores (predictions.csv rows: the positive class's score
    for two classes, else every class's) on the rows every member scored."""
    ids = sorted(set.intersection(*(set(s) for s in scores)))
    mean = np.mean([[s[i] for i in ids] for s in scores], axis=0)
    probs = np.column_stack([1.0 - mean[:, 0], mean[:, 0]]) if num_classes == 2 else mean
    return score(probs, np.asarray([truth[i] for i in ids]), num_classes)


def central_xgboost(split: AlignedSplit, seed: int) -> dict:
    """Fitted once per split: the central baseline and vertical XGBoost's depth and rounds both need it."""
    if "xgboost" not in split.fitted:
        split.fitted["xgboost"] = central(split, fit_xgboost, seed)
    return dict(split.fitted["xgboost"])


def fit_baseline(method: str, split: AlignedSplit, seed: int) -> dict:
    """One fitted member of a central or label-party baseline on `split` (as a job of `seed` sees it)."""
    if method == "central XGBoost":
        return central_xgboost(split, seed)
    if method == TUNED:
        return central(split, fit_xgboost, seed, grid=TUNED_GRID)
    if method == "central LR":
        return central(split, fit_logreg, seed)
    grid = {"grid": TUNED_GRID} if method == LABEL_ALONE_TUNED else {}
    return label_local(split, seed, all_labels=method != LABEL_ALONE_ALIGNED, **grid)


def run_baseline(method: str, splits: list[AlignedSplit], seeds: list[int], work: Path) -> dict:
    """`method` on the split as each job seed of `seeds` sees it (its validation rows); more than one
    member: their test scores averaged, as run_ensemble does for the VFL methods."""
    if method == VERTICAL_XGB:  # at the depth and rounds the central XGBoost chose on validation
        chosen = central_xgboost(splits[0], seeds[0])
        out = run_on_split(splits[0], chosen["depth"], chosen["rounds"], work)
    else:
        members = [fit_baseline(method, split, seed) for split, seed in zip(splits, seeds)]
        out = members[0] if len(members) == 1 else ensemble_of(members, splits)
    out.pop("test_scores", None)  # 6000 numbers: the record keeps the metrics and the choices
    metrics = {k: out.pop(k) for k in ("val_auc", "test_auc") if k in out}
    return {"metrics": metrics, "mb_per_site": None, "comms_per_site": None, "training": out}


def ensemble_of(members: list[dict], splits: list[AlignedSplit]) -> dict:
    """The AUC of the members' averaged test scores (each member scored the test rows in its own job seed's
    order), their median validation AUC, and what each member chose."""
    scores = [dict(zip(split.test_ids, ([p] for p in m["test_scores"]))) for m, split in zip(members, splits)]
    first = splits[0]
    truth = dict(zip(first.test_ids, first.y(first.test_ids, "test").tolist()))
    _, value = ensemble_metric(scores, truth, first.labels.num_classes)
    chosen = [{k: v for k, v in m.items() if k not in ("val_auc", "test_auc", "test_scores")} for m in members]
    return {"val_auc": float(np.median([m["val_auc"] for m in members])), "test_auc": value, "members": chosen}


def run_split(spec: BenchSpec, out: Path, dataset: str, overlap: int, seed: int, methods: list[str]) -> list[dict]:
    """Every method of `methods` on one split; a record each."""
    torch_threads(1)
    root = split_for(spec, out, dataset, overlap, seed)
    loaded: dict[int, AlignedSplit] = {}

    def split_of(job_seed: int) -> AlignedSplit:
        """The split as a job of `job_seed` sees it (its validation rows), loaded once."""
        if job_seed not in loaded:
            sites = parse_sites(str(spec.sites))
            val_fraction = spec.settings.get("val_fraction", make_config().val_fraction)
            transform = spec.settings.get("numeric_transform", make_config().numeric_transform)
            loaded[job_seed] = AlignedSplit.load(root, sites, sites[0], job_seed, val_fraction, transform)
        return loaded[job_seed]

    records = []
    for method in methods:
        work = out / "work" / f"{dataset}_{overlap}_{seed}_{method.replace(' ', '_')}"
        start = time.perf_counter()
        if method in VFL_METHODS:
            record = run_vfl(spec, method, root, seed, work)
        else:
            seeds = spec.job_seeds(method, seed)
            record = run_baseline(method, [split_of(job_seed) for job_seed in seeds], seeds, work)
        shutil.rmtree(work, ignore_errors=True)
        records.append(
            {
                "dataset": dataset,
                "overlap": overlap,
                "seed": seed,
                "method": method,
                **record,
                "wall_s": round(time.perf_counter() - start, 1),
                **provenance(spec, method, seed),
            }
        )
    return records


def provenance(spec: BenchSpec, method: str, seed: int) -> dict[str, Any]:
    """What a record needs to be rerun and told apart: the split (its seed is the grid's `seed`), the job
    seeds (one per ensemble member), every setting, the code and the environment."""
    return {
        **spec.folder_settings(),
        "job": spec.job_settings(method),
        "job_seeds": spec.job_seeds(method, seed),
        "git": git_state(),
        "env": environment(),
    }


def torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def run_grid(spec: BenchSpec, out: Path, progress: Callable[[str], None] = print) -> Path:
    """Run every (dataset, overlap, seed, method) not yet in out/results.jsonl; returns that file. With
    `spec.workers` > 1, splits run in that many processes at once."""
    spec.check()
    results = out / "results.jsonl"
    records = read_jsonl(results)
    folder.claim(out, spec.folder_settings(), BenchSpec().folder_settings(), has_runs=bool(records))
    done = {(r["dataset"], r["overlap"], r["seed"], r["method"]) for r in records}
    todo = [
        (d, n, s, [m for m in spec.methods if (d, n, s, m) not in done])
        for d in spec.datasets
        for n in spec.overlaps
        for s in spec.seeds
    ]
    todo = [cell for cell in todo if cell[3]]

    def keep(records: list[dict]) -> None:
        with results.open("a") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
                progress(
                    f"{record['dataset']} N_o={record['overlap']} seed {record['seed']} {record['method']}: "
                    f"test {record['metrics'].get('test_auc', float('nan')):.4f} ({record['wall_s']} s)"
                )

    if spec.workers <= 1:
        for cell in todo:
            keep(run_split(spec, out, *cell))
    else:
        context = multiprocessing.get_context("spawn")  # torch and NVFlare's simulator in fresh processes
        with ProcessPoolExecutor(spec.workers, mp_context=context) as pool:
            futures = [pool.submit(run_split, spec, out, *cell) for cell in todo]
            try:
                for future in as_completed(futures):
                    keep(future.result())
            except BaseException:  # the first failure ends the bench: the splits not started are not run
                for future in futures:
                    future.cancel()
                raise
    return results
