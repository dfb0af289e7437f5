"""FedHSSL and its ablations on real tables (He et al., Table IV / Fig. 6 protocol, reduced for CPU).

Setting, as in the paper's Section V-A: 40 % of all rows are aligned (`vflflare split --overlap`), and
every aligned training row pretrains (cross-party SSL), labeled or not; every training row of a site
pretrains its local encoder. L labeled aligned rows finetune (L = 200, 400, 1000), plus L/4 labeled
validation rows for early stopping (val_fraction 0.2 of the labeled rows: the paper does not say how it
selects; we never select on test). Test = the split's 20 %. K = 2 parties.

Methods: the six variants of the one plug-in with SimSiam (FedHSSL, FedGSSL, FedCSSL, FedLocalSSL,
FedLocalSSL+PMA, FedSplitNN), FedHSSL with BYOL and with MoCo; in the same table the other vflflare
algorithms on the same rows (vanilla split-NN, SS-VFL-C, one-shot) and gradient-boosted trees on the
labeled rows with both parties' columns joined (the paper's LGB: XGBoost here, depth by validation).

Every FedHSSL run uses package defaults (40 global iterations, batch 512, Appendix B's projectors and
predictor, gamma 0.5), finetune lr 0.01 (the middle of the paper's grid {0.005, 0.01, 0.03}; one value,
as no grid is selected on validation yet). Runs go through the in-process driver, which gives the
simulator's numbers exactly (tests/test_fedhssl_simulator.py).

    vflflare bench run fedhssl --datasets credit_default --set labeled=[200] --seeds 0 1 2 \
        --set job='{"global_iterations": 10}' --out benchmarks/results/fedhssl_g10.jsonl
    vflflare bench tables          # FEDHSSL_REPORT.md's tables from the committed records

Records go to --out: one file per job setting (the committed ones: fedhssl_g10.jsonl, fedhssl_g40.jsonl,
fedhssl_mnist.jsonl, and the probe's fedhssl_probe.jsonl); a rerun refuses a file of runs with other settings.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vflflare.bench.baselines import trees
from vflflare.bench.inprocess import limit_threads, run_vfl
from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl, refuse_mixed_settings
from vflflare.bench.splits import job_rows, prepare_split, source_table
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import register
from vflflare.config import JobConfig
from vflflare.data.sources import load_source
from vflflare.data.split import parse_sites
from vflflare.data.split.dataset import split_dataset, synthetic_options
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import get_algorithm, make_config

SPLITS = Path("/tmp/vflflare-bench/fedhssl-splits")
SETTINGS = ["credit_default", "adult"]
LABELED = [200, 400, 1000]
ALIGNED_SHARE = 0.4  # of all rows (paper)
TEST_FRACTION = 0.2
SITES = ["site-1", "site-2"]
IMAGE_ROWS = {"mnist": (6000, 1000), "cifar10": (6000, 1000)}  # (train, test) images, reduced for CPU
METHODS: dict[str, dict[str, Any]] = {
    "FedHSSL": {"algorithm": "fedhssl", "variant": "fedhssl"},
    "FedGSSL": {"algorithm": "fedhssl", "variant": "fedgssl"},
    "FedCSSL": {"algorithm": "fedhssl", "variant": "fedcssl"},
    "FedLocalSSL": {"algorithm": "fedhssl", "variant": "fedlocalssl"},
    "FedLocalSSL+PMA": {"algorithm": "fedhssl", "variant": "fedlocalssl_pma"},
    "FedSplitNN": {"algorithm": "fedhssl", "variant": "fedsplitnn"},
    "FedHSSL-BYOL": {"algorithm": "fedhssl", "variant": "fedhssl", "ssl_method": "byol"},
    "FedHSSL-MoCo": {"algorithm": "fedhssl", "variant": "fedhssl", "ssl_method": "moco"},
    "vanilla": {"algorithm": "vanilla"},
    "SS-VFL-C": {"algorithm": "ssvfl_c"},
    "one-shot": {"algorithm": "oneshot"},
}
TREES = "trees (labeled rows)"
ORDER = ["FedHSSL", "FedGSSL", "FedCSSL", "FedLocalSSL", "FedSplitNN"]  # the paper's claimed order


def labeled_fraction(labeled: int, aligned: int, val_fraction: float = JobConfig.val_fraction) -> float:
    """The labeled_fraction whose ceil(fraction * aligned) labeled rows leave exactly `labeled` training rows
    after validation takes ceil(val_fraction * n) of them (labeled a multiple of 4 at val_fraction 0.2)."""
    total = int(round(labeled / (1 - val_fraction)))
    return (total - 0.5) / aligned


def test_metric(record: dict) -> float:
    """test AUC (two classes) or test accuracy."""
    return next(v for k, v in record["metrics"].items() if k.startswith("test_"))


def parse_setting(setting: str) -> tuple[str, list[str]]:
    dataset, _, parties = setting.partition(":")
    return dataset, [f"site-{i + 1}" for i in range(int(parties or 2))]


def split_for(data_dir: Path, setting: str, seed: int, splits: Path) -> tuple[Path, int]:
    """Tables: all rows, ALIGNED_SHARE of them aligned. Images (reduced for CPU): IMAGE_ROWS train and
    test images, ALIGNED_SHARE of them aligned, cut into halves (K = 2) or quadrants (K = 4)."""
    dataset, sites = parse_setting(setting)
    if dataset not in IMAGE_ROWS:
        n_rows = len(load_source(dataset, data_dir)[2])
        overlap = int(round(ALIGNED_SHARE * n_rows))
        return prepare_split(data_dir, overlap, seed, splits, dataset, len(sites)), overlap
    train, test = IMAGE_ROWS[dataset]
    overlap = int(round(ALIGNED_SHARE * (train + test)))
    out = splits / f"{dataset}_k{len(sites)}_n{overlap}_s{seed}"
    if not (out / "manifest.json").exists():
        split_dataset(
            dataset,
            str(data_dir),
            parse_sites(str(len(sites))),
            overlap,
            seed,
            str(out),
            train_rows=train,
            test_rows=test,
            synthetic=synthetic_options(dataset, seed, None, None, None),
        )
    return out, overlap


PROBE_ROWS = 5000  # aligned rows whose true labels the diagnostic probe (not a method) trains on


class ProbeRuntime(SiteRuntime):
    """Keeps the site's frozen representations of its aligned unlabeled and test rows when finetuning
    starts, i.e. of the pretrained towers (the diagnostic reads them in process)."""

    pretrained: dict | None = None

    def handle(self, task: str, payload: dict[str, Any]) -> dict[str, Any]:
        if task == "split" and self.pretrained is None:
            party = self.party
            self.pretrained = {
                **party.representations(["aligned_unlabeled", "test"]),
                "ids": [party.view.train_ids[int(r)] for r in party.rows_of("aligned_unlabeled")],
                "test_ids": [party.view.test_ids[int(r)] for r in party.rows_of("test")],
            }
        return super().handle(task, payload)


def linear_probe(
    method: str, setting: str, labeled: int, seed: int, overrides: dict, data_dir: Path, splits: Path
) -> dict[str, Any]:
    """Diagnostic: a logistic regression on both parties' frozen pretrained towers, trained on PROBE_ROWS
    aligned rows with their true labels, test AUC. Separates what pretraining learnt from the noise of
    finetuning on 200 rows; FedSplitNN's towers are the untrained initialisation."""
    dataset, sites = parse_setting(setting)
    root, overlap = split_for(data_dir, setting, seed, splits)
    known = {f.name for f in dataclasses.fields(get_algorithm("fedhssl").Config)}
    cfg = make_config(
        {
            **{k: v for k, v in overrides.items() if k in known},
            **METHODS[method],
            "seed": seed,
            "labeled_fraction": labeled_fraction(labeled, overlap),
            "split_epochs": 1,
            "finetune_lrs": [0.01],
        }
    )
    _, runtimes = run_vfl(cfg, root, ProbeRuntime, sites)
    snaps = [runtimes[s].pretrained for s in sites]
    train_x = np.concatenate([s["aligned_unlabeled"][:PROBE_ROWS] for s in snaps], axis=1)
    test_x = np.concatenate([s["test"] for s in snaps], axis=1)
    table = source_table(data_dir, dataset)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    probe.fit(train_x, table.y(snaps[0]["ids"][:PROBE_ROWS]))
    auc = float(roc_auc_score(table.y(snaps[0]["test_ids"]), probe.predict_proba(test_x)[:, 1]))
    return {
        "setting": setting,
        "labeled": labeled,
        "seed": seed,
        "method": method,
        "overrides": overrides,
        "probe_test_auc": auc,
        "probe_rows": PROBE_ROWS,
        "env": environment_record(),
    }


def run_one(
    method: str, setting: str, labeled: int, seed: int, overrides: dict, data_dir: Path, splits: Path
) -> dict[str, Any]:
    dataset, sites = parse_setting(setting)
    root, overlap = split_for(data_dir, setting, seed, splits)
    fraction = labeled_fraction(labeled, overlap)
    start = time.perf_counter()
    record: dict[str, Any] = {
        "setting": setting,
        "labeled": labeled,
        "seed": seed,
        "method": method,
        "overrides": overrides,
    }
    if method == TREES:
        rows = job_rows(root, seed, JobConfig.val_fraction, sites, fraction)
        result = trees(rows.train_ids, rows, source_table(data_dir, dataset), seed)
        record.update(
            metrics=result["metrics"],
            training=result["training"],
            rows={"aligned_train": len(rows.train_ids), "val": len(rows.val_ids)},
        )
    else:
        known = {f.name for f in dataclasses.fields(get_algorithm(METHODS[method]["algorithm"]).Config)}
        own = {k: v for k, v in overrides.items() if k in known}  # e.g. global_iterations: FedHSSL's only
        cfg = make_config({**own, **METHODS[method], "seed": seed, "labeled_fraction": fraction})
        result, _ = run_vfl(cfg, root, sites=sites)
        if "error" in result:
            raise RuntimeError(f"{method} {dataset} {labeled} seed {seed}: {result['error']}")
        per_phase = result["communication"]["per_phase_site"]
        wall: dict[str, float] = defaultdict(float)
        for phase in result.get("phases", []):
            wall[phase["name"]] += phase["wall_s"]
        record.update(
            metrics=result["metrics"],
            rows=result["rows"],
            training=result["training"],
            mb_per_site={p: round(v[sites[-1]]["payload_bytes"] / 1e6, 3) for p, v in per_phase.items()},
            comms_per_site={p: [v[sites[-1]]["uploads"], v[sites[-1]]["downloads"]] for p, v in per_phase.items()},
            phase_wall_s={p: round(s, 1) for p, s in wall.items()},
        )
    record.update(wall_s=round(time.perf_counter() - start, 1), env=environment_record())
    assert record["rows"]["aligned_train"] == labeled, record["rows"]
    return record


# ------------------------------------------------------------------------------------------- tables
def tables(records: list[dict]) -> str:
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r["setting"], r["labeled"])][r["method"]].append(r)
    out = [grid_table(records, sorted(groups))]
    out += ["", "Paper's order FedHSSL > FedGSSL > FedCSSL > FedLocalSSL > FedSplitNN (test AUC medians; per seed):"]
    for (setting, labeled), by_method in sorted(groups.items()):
        seeds = sorted(set.intersection(*(({r["seed"] for r in by_method.get(m, [])}) for m in ORDER)))
        medians = (
            [np.median([test_metric(r) for r in by_method[m] if r["seed"] in seeds]) for m in ORDER] if seeds else []
        )
        holds = [
            all(a > b for a, b in zip(v, v[1:]))
            for v in ([next(test_metric(r) for r in by_method[m] if r["seed"] == s) for m in ORDER] for s in seeds)
        ]
        if seeds:
            in_order = all(a > b for a, b in zip(medians, medians[1:]))
            out.append(
                f"- {setting}, {labeled} labeled: medians "
                + ", ".join(f"{m} {v:.3f}" for m, v in zip(ORDER, medians))
                + f"; in the paper's order: {'yes' if in_order else 'no'}; "
                + f"strict order on {sum(holds)}/{len(seeds)} seeds"
            )
    out += [
        "",
        "| setting | labeled | method | MB/site cross_ssl | pma | finetune | comms/site (up/down) | wall s: "
        "pretraining | finetune |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (setting, labeled), by_method in sorted(groups.items()):
        for m, rs in by_method.items():
            if m == TREES or "mb_per_site" not in rs[0]:
                continue
            mb = {
                p: np.median([r["mb_per_site"].get(p, 0) for r in rs])
                for p in ("cross_ssl", "pma", "finetune", "split_training")
            }
            comms = [sum(v[i] for v in rs[0]["comms_per_site"].values()) for i in (0, 1)]
            pre = np.median(
                [
                    sum(r["phase_wall_s"].get(p, 0) for p in ("cross_ssl", "local_ssl", "pma", "local_pretraining"))
                    for r in rs
                ]
            )
            fine = np.median(
                [r["phase_wall_s"].get("finetune", r["phase_wall_s"].get("split_training", 0)) for r in rs]
            )
            out.append(
                f"| {setting} | {labeled} | {m} | {mb['cross_ssl']:.1f} | {mb['pma']:.1f} | "
                f"{mb['finetune'] + mb['split_training']:.2f} | {comms[0]}/{comms[1]} (seed {rs[0]['seed']}) | "
                f"{pre:.0f} | {fine:.0f} |"
            )
    return "\n".join(out)


LABELS = {
    "FedHSSL": "FedHSSL (SimSiam)",
    "FedLocalSSL": "FedLocalSSL (local SimSiam)",
    "FedLocalSSL+PMA": "FedLocalSSL + PMA",
    "FedSplitNN": "FedSplitNN (no pretraining)",
    "vanilla": "vanilla split-NN",
}


def _by_method(records: list[dict], setting: str, labeled: int) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r["setting"] == setting and r["labeled"] == labeled:
            out[r["method"]].append(r)
    return {m: sorted(rs, key=lambda r: r["seed"]) for m, rs in out.items()}


def method_table(records: list[dict], setting: str, labeled: int) -> str:
    """FEDHSSL_REPORT sections 1, 4: test metric per method, median (per seed); in bold the best federated
    median, and the trees' when they beat it."""
    by = _by_method(records, setting, labeled)
    medians = {m: float(np.median([test_metric(r) for r in rs])) for m, rs in by.items()}
    best = max((m for m in medians if m != TREES), key=medians.get)
    out = ["| method | test AUC |", "|---|---|"]
    for m in (m for m in [*METHODS, TREES] if m in by):
        cell = f"{medians[m]:.3f}"
        if m == best or (m == TREES and medians[m] > medians[best]):
            cell = f"**{cell}**"
        name = f"trees on the {labeled} labeled rows (not federated)" if m == TREES else LABELS.get(m, m)
        out.append(f"| {name} | {cell} ({', '.join(f'{test_metric(r):.3f}' for r in by[m])}) |")
    return "\n".join(out)


SETTING_NAMES = {
    "credit_default": "credit default",
    "adult": "Adult",
    "mnist:2": "MNIST halves",
    "mnist:4": "MNIST quadrants",
}


def grid_table(
    records: list[dict], cells: list[tuple[str, int]], methods: list[str] | None = None, summary: bool = False
) -> str:
    """Section 7: one row per (setting, L), one column per method, median (per seed); in bold the best
    federated median (ties at 3 decimals), and the trees' when at or above it. `summary`: medians only
    (docs/benchmarks.md)."""
    methods = methods or [m for m in [*METHODS, TREES] if any(r["method"] == m for r in records)]
    names = [("trees on the L rows" if summary else "trees") if m == TREES else m for m in methods]
    out = ["| setting | L | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(methods)]
    for setting, labeled in cells:
        by = _by_method(records, setting, labeled)
        if not by:
            continue
        medians = {m: f"{np.median([test_metric(r) for r in by[m]]):.3f}" for m in methods if m in by}
        best = max(float(v) for m, v in medians.items() if m != TREES)
        row = []
        for m in methods:
            if m not in medians:
                row.append("")
                continue
            if summary:
                row.append(medians[m])
                continue
            cell = f"**{medians[m]}**" if float(medians[m]) >= best else medians[m]
            row.append(f"{cell} ({', '.join(f'{test_metric(r):.3f}' for r in by[m])})")
        out.append(f"| {SETTING_NAMES.get(setting, setting)} | {labeled} | " + " | ".join(row) + " |")
    return "\n".join(out)


def summary_table(*record_files: list[dict]) -> str:
    """docs/benchmarks.md: the grid's medians for the main variants, the other algorithms and the trees."""
    cells = [
        ("credit_default", 200),
        ("credit_default", 1000),
        ("adult", 200),
        ("adult", 1000),
        ("mnist:2", 200),
        ("mnist:4", 200),
    ]
    methods = ["FedHSSL", "FedGSSL", "FedCSSL", "FedLocalSSL", "FedSplitNN", "SS-VFL-C", "one-shot", TREES]
    return grid_table([r for records in record_files for r in records], cells, methods, summary=True)


def probe_table(records: list[dict]) -> str:
    """Section 2: the linear probe's test AUC per pretraining variant."""
    auc = {r["method"]: r["probe_test_auc"] for r in records}
    names = [m for m in ["FedSplitNN", "FedLocalSSL", "FedCSSL", "FedGSSL", "FedHSSL"] if m in auc]
    head = [f"{m} (untrained)" if m == "FedSplitNN" else m for m in names]
    return "\n".join(
        [
            "| towers | " + " | ".join(head) + " |",
            "|---|" + "---|" * len(names),
            "| linear probe test AUC | " + " | ".join(f"{auc[m]:.3f}" for m in names) + " |",
        ]
    )


def _pretraining_s(r: dict) -> float:
    return sum(r["phase_wall_s"].get(p, 0) for p in ("cross_ssl", "local_ssl", "pma", "local_pretraining"))


def iterations_table(
    g40: list[dict], g10: list[dict], setting: str = "credit_default", labeled: int = 200, seed: int = 0
) -> str:
    """Section 3: the paper's order at 40 global iterations against 10, one seed."""

    def pick(records: list[dict]) -> dict:
        return {r["method"]: r for r in records if (r["setting"], r["labeled"], r["seed"]) == (setting, labeled, seed)}

    at40, at10 = pick(g40), pick(g10)
    names = [m for m in ORDER if m in at40]
    best = max(names, key=lambda m: test_metric(at40[m]))
    rows = [
        (
            "40 iterations",
            [f"**{test_metric(at40[m]):.3f}**" if m == best else f"{test_metric(at40[m]):.3f}" for m in names],
        ),
        ("10 iterations (section 1, same seed)", [f"{test_metric(at10[m]):.3f}" if m in at10 else "-" for m in names]),
        ("pretraining wall s, 40 iterations", [f"{_pretraining_s(at40[m]):.0f}" for m in names]),
        (
            "cross_ssl + pma MB per site, 40 iterations",
            [f"{at40[m]['mb_per_site'].get('cross_ssl', 0) + at40[m]['mb_per_site'].get('pma', 0):.0f}" for m in names],
        ),
    ]
    return "\n".join(
        [
            "| | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
            *(f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows),
        ]
    )


def communication_table(records: list[dict], setting: str = "credit_default", labeled: int = 200) -> str:
    """Section 6: payload MB per site by phase and messages on the first seed, wall times median over seeds."""
    out = [
        "| method | cross_ssl MB | pma MB | finetune MB | comms up/down | pretraining s | finetune s |",
        "|---|---|---|---|---|---|---|",
    ]
    by = _by_method(records, setting, labeled)
    for m, rs in ((m, by[m]) for m in METHODS if m in by):
        mb = {p: rs[0]["mb_per_site"].get(p, 0) for p in ("cross_ssl", "pma", "finetune", "split_training")}
        comms = [sum(v[i] for v in rs[0]["comms_per_site"].values()) for i in (0, 1)]
        fine = np.median([r["phase_wall_s"].get("finetune", r["phase_wall_s"].get("split_training", 0)) for r in rs])
        mb_cell = lambda v: f"{v:.1f}" if v else "0"  # noqa: E731
        out.append(
            f"| {LABELS.get(m, m).split(' (')[0]} | {mb_cell(mb['cross_ssl'])} | {mb_cell(mb['pma'])} | "
            f"{mb['finetune'] + mb['split_training']:.2f} | {comms[0]}/{comms[1]} | "
            f"{np.median([_pretraining_s(r) for r in rs]):.0f} | {fine:.0f} |"
        )
    return "\n".join(out)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (setting, L, seed, method) not yet in `out` (no trees on images); with `probe`, the linear probe
    of the pretrained towers instead (FedHSSL variants only, the first L)."""
    settings = spec.settings
    overrides = dict(settings["job"])
    limit_threads()
    if settings["probe"]:
        for setting in spec.datasets:
            for seed in spec.seeds:
                for method in [m for m in spec.methods if METHODS.get(m, {}).get("algorithm") == "fedhssl"]:
                    record = linear_probe(method, setting, settings["labeled"][0], seed, overrides, data_dir, SPLITS)
                    append_jsonl(out, record)
                    print(f"probe {setting} seed {seed} {method}: test AUC {record['probe_test_auc']:.4f}", flush=True)
        return
    refuse_mixed_settings(out, overrides)
    done = {(r["setting"], r["labeled"], r["seed"], r["method"]) for r in read_jsonl(out)}
    for setting in spec.datasets:
        for labeled in settings["labeled"]:
            for seed in spec.seeds:
                for method in spec.methods:
                    if (setting, labeled, seed, method) in done or (
                        method == TREES and parse_setting(setting)[0] in IMAGE_ROWS
                    ):
                        continue
                    record = run_one(method, setting, labeled, seed, overrides, data_dir, SPLITS)
                    append_jsonl(out, record)
                    print(
                        f"{setting} {labeled} seed {seed} {method}: test {test_metric(record):.4f}, "
                        f"{record['wall_s']} s",
                        flush=True,
                    )


def _committed(*files: str) -> list[list[dict]]:
    return [read_jsonl(COMMITTED / name) for name in files]


G10, G40, MNIST, PROBE = "fedhssl_g10.jsonl", "fedhssl_g40.jsonl", "fedhssl_mnist.jsonl", "fedhssl_probe.jsonl"
register("fedhssl/credit_200", lambda: method_table(*_committed(G10), setting="credit_default", labeled=200))
register("fedhssl/credit_400", lambda: method_table(*_committed(G10), setting="credit_default", labeled=400))
register("fedhssl/adult_200", lambda: method_table(*_committed(G10), setting="adult", labeled=200))
register("fedhssl/communication", lambda: communication_table(*_committed(G10)))
register(
    "fedhssl/grid",
    lambda: grid_table(*_committed(G10), cells=[("credit_default", 1000), ("adult", 400), ("adult", 1000)]),
)
register("fedhssl/mnist", lambda: grid_table(*_committed(MNIST), cells=[("mnist:2", 200), ("mnist:4", 200)]))
register("fedhssl/summary", lambda: summary_table(*_committed(G10, MNIST)))
register("fedhssl/iterations", lambda: iterations_table(*_committed(G40, G10)))
register("fedhssl/probe", lambda: probe_table(*_committed(PROBE)))

suite(
    Suite(
        name="fedhssl",
        about="FedHSSL and its ablations against the other algorithms and trees (FEDHSSL_REPORT.md)",
        runner=run,
        datasets=tuple(SETTINGS),  # DATASET or DATASET:K (mnist:2, mnist:4)
        methods=(*METHODS, TREES),
        seeds=(0, 1, 2),
        settings={
            "labeled": tuple(LABELED),  # L, the labeled aligned rows
            "job": {},  # config overrides (all methods)
            "probe": False,  # diagnostic instead: linear probe of the pretrained towers (see linear_probe)
        },
    )
)
