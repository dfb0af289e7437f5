"""Self-supervised VFL on real tables: supervised VFL (vanilla split NN), SS-VFL-I and SS-VFL-C at
1 / 5 / 10 / 25 % labeled training rows, laid out like Table 1 and Fig. 3 of the SS-VFL paper.

Settings: credit default (2 parties: 10 attributes vs 13) and its 4-party split, Adult (2 parties: 7
columns each). Every training row is shared (`vflflare split --overlap <all training rows>`), so
"labeled fraction" is a fraction of all training rows, as in the paper. The labeled rows are the first
ceil(fraction * n) rows of the job's canonical order; validation is the first 20 % of those; every
other training row is unlabeled and used only by the SS-VFL pretraining. Test = the split's 20 %.

Every method runs through the in-process driver (the NVFlare jobs' phases and ledger) with package
defaults and `test_curve: true`, so the split-NN methods score the test rows after each epoch; the
test representations are counted apart from training traffic.

Communication to reach a target, as in Table 1: payload MB of all sites, training traffic only.
- vanilla / SS-VFL-C: split-NN payload (per-batch representations and gradients, per-epoch
  validation representations) up to the first epoch whose test metric reaches the target;
- SS-VFL-I: its single upload of the labeled and validation rows' representations, if its final test
  metric reaches the target.
Two targets per (setting, fraction), each rounded down to 0.005: the lowest of the three methods'
mean final test AUC (a level every method reaches on average, so the columns compare what each pays
for it) and the highest ('-' = reached by no seed; 'k/3' = reached by k seeds, mean over those).

The two SS-VFL variants pretrain identically (same seed, rows and settings): the pretrained encoders
are computed once per (setting, seed, fraction) and reused (`PretrainOnce`; `--set pretrain_cache=false`
turns that off, to check that the numbers do not change).

The pretraining defaults were tuned on a held-out split seed (100): SS-VFL-I's validation AUC at 25 %
labeled, credit default and Adult with 2 parties, for each pretraining setting of TUNING (`--set tuning=true`).

Records (benchmarks/results/ssvfl.jsonl, committed) keep numbers and settings only: metrics, row
counts, payload, epochs, the job overrides and variant, commit and environment. The per-epoch test
curve is kept only where its best-so-far test AUC rises, which is all the to-target tables read.

    vflflare bench run ssvfl --committed             # everything (resumes: finished runs are skipped)
    vflflare bench run ssvfl --committed --set tuning=true   # the tuning table's runs
    vflflare bench run ssvfl --datasets credit_default:2 --set fractions=[0.01] --seeds 0
    vflflare bench tables                            # rewrite the report's tables from the results file

The suite's datasets are settings DATASET:K (K parties); a run with job overrides (`--set job=...`) names
them with `--set variant=NAME`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import multiprocessing
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.bench.baselines import trees
from vflflare.bench.inprocess import limit_threads, run_vfl, test_inference_bytes
from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import read_jsonl
from vflflare.bench.splits import job_rows, prepare_split, source_table
from vflflare.bench.stats import mean_std
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table
from vflflare.config import JobConfig
from vflflare.data.sources import load_source
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import get_algorithm, make_config

RESULTS = COMMITTED / "ssvfl.jsonl"
SPLITS = Path("/tmp/vflflare-bench/ssvfl-splits")
SETTINGS = ["credit_default:2", "credit_default:4", "adult:2"]
FRACTIONS = [0.01, 0.05, 0.10, 0.25]
METHODS = ["vanilla", "ssvfl_i", "ssvfl_c"]
# not federated: gradient-boosted trees on the labeled rows with every party's columns joined, what a
# user who could pool the labeled rows would train instead (a reference, not a competitor)
REFERENCE = "trees_labeled"
LABELS = {"vanilla": "VFL", "ssvfl_i": "SS-VFL-I", "ssvfl_c": "SS-VFL-C", REFERENCE: "trees on labeled rows"}
TEST_FRACTION = 0.2  # vflflare split's default
DIGITS = 6  # AUCs in the records (the tables show 3)
DEFAULT = "default"  # the variant of the main tables: package defaults, no --set
# the tuning table: SS-VFL-I at 25 % labeled on a held-out split seed, scored by validation AUC;
# each row of the table: its label and the pretraining settings of its cells (joined by " / ")
TUNING_SETTINGS, TUNING_FRACTION, TUNING_SEED = ["credit_default:2", "adult:2"], 0.25, 100
TUNING_ROWS: list[tuple[str, list[dict[str, Any]]]] = [
    ("none (frozen random encoder)", [{"pretrain_epochs": 0}]),
    *(
        (
            f"20 epochs, τ {tau}, SCARF rate 0.3 / 0.6",
            [{"pretrain_epochs": 20, "cl_temperature": tau, "scarf_rate": rate} for rate in (0.3, 0.6)],
        )
        for tau in (0.1, 0.5, 1.0)
    ),
    *(
        (f"50 epochs, τ {tau}, SCARF rate 0.3", [{"pretrain_epochs": 50, "cl_temperature": tau, "scarf_rate": 0.3}])
        for tau in (0.1, 0.5)
    ),
]


def tuning_variant(overrides: dict[str, Any]) -> str:
    if not overrides.get("pretrain_epochs"):
        return "tune_none"
    return f"tune_e{overrides['pretrain_epochs']}_t{overrides['cl_temperature']}_r{overrides['scarf_rate']}"


TUNING = {tuning_variant(o): o for _, cells in TUNING_ROWS for o in cells}


def parse_setting(text: str) -> tuple[str, int]:
    dataset, _, parties = text.partition(":")
    return dataset, int(parties or 2)


def prepare_all_shared_split(data_dir: Path, dataset: str, parties: int, seed: int, splits: Path) -> Path:
    """Every training row aligned: the overlap is all rows but the test share."""
    n_rows = len(load_source(dataset, data_dir)[2])
    overlap = n_rows - int(round(TEST_FRACTION * n_rows))
    return prepare_split(data_dir, overlap, seed, splits, dataset, parties)


class PretrainOnce(SiteRuntime):
    """A site runtime that keeps its encoder after contrastive pretraining and, for the next run with
    the same key, loads it instead of pretraining again. The key is everything pretraining depends on."""

    cache: dict[tuple, tuple[dict, dict]] = {}
    key: tuple = ()

    def handle(self, task: str, payload: dict[str, Any]) -> dict[str, Any]:
        if task != "contrastive_pretrain":
            return super().handle(task, payload)
        key = (self.site, *self.key)
        if key in self.cache:
            state, stats = self.cache[key]
            self.party.encoder.load_state_dict(state)
        else:
            stats = self.party.pretrain()
            self.cache[key] = (copy.deepcopy(self.party.encoder.state_dict()), stats)
        return {"pretrain": stats}


def pretrain_key(cfg: JobConfig, root: Path) -> tuple:
    pretraining = {k: v for k, v in cfg.to_dict().items() if k.startswith("pretrain_")}
    return (
        str(root),
        cfg.seed,
        cfg.labeled_fraction,
        cfg.val_fraction,
        cfg.cl_temperature,
        cfg.scarf_rate,
        cfg.projection_dim,
        json.dumps(cfg.model, sort_keys=True),
        cfg.rep_dim,
        cfg.numeric_transform,
        tuple(sorted(pretraining.items())),
    )


def method_overrides(method: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The --set overrides that a method has: a variant's pretraining settings do not reach vanilla VFL."""
    known = {f.name for f in dataclasses.fields(get_algorithm(method).Config)}
    return {k: v for k, v in overrides.items() if k in known}


def training_bytes(result: dict) -> int:
    """Training traffic of a finished run (see the module doc)."""
    phases = result["communication"]["per_phase"]
    if result["algorithm"] == "ssvfl_i":
        return phases["representations"]["payload_bytes"] - test_inference_bytes(result)
    return phases["split_training"]["payload_bytes"]


def run_one(
    method: str, setting: str, fraction: float, seed: int, overrides: dict[str, Any], root: Path, cached: bool = True
) -> dict[str, Any]:
    dataset, parties = parse_setting(setting)
    cfg = make_config(
        {
            **method_overrides(method, overrides),
            "algorithm": method,
            "seed": seed,
            "labeled_fraction": fraction,
            **({} if method == "ssvfl_i" else {"test_curve": True}),
        }
    )
    PretrainOnce.key = pretrain_key(cfg, root) if method != "vanilla" else ()
    start = time.perf_counter()
    result, _ = run_vfl(cfg, root, PretrainOnce if cached else SiteRuntime, [f"site-{i + 1}" for i in range(parties)])
    curve = [
        [p["training_payload_bytes"] / 1e6, round(p["test_auc"], DIGITS)]
        for p in result["training"].get("test_curve", [])
    ]
    return {
        "setting": setting, "fraction": fraction, "seed": seed, "method": method,
        "metrics": {k: round(result["metrics"][k], DIGITS) for k in ("val_auc", "test_auc")}, "rows": result["rows"],
        "training_mb": training_bytes(result) / 1e6,
        "curve": rising(curve),
        "split_epochs": result["training"].get("split_epochs"),
        "pretrain_steps": per_site(result["training"].get("pretrain_steps")),
        "wall_s": round(time.perf_counter() - start, 1),
    }  # fmt: skip


def rising(curve: list[list[float]]) -> list[list[float]]:
    """The (MB, test AUC) points of a curve where the test AUC beats every earlier point: the first MB at
    which any target is reached is always one of them, so `mb_to_reach` gives the same on the whole curve."""
    points, best = [], -math.inf
    for mb, auc in curve:
        if auc > best:
            points.append([mb, auc])
            best = auc
    return points


def per_site(steps: dict[str, int] | None) -> int | dict[str, int] | None:
    """Pretraining steps: one number when every site took as many (they pretrain on the same rows here)."""
    return steps.popitem()[1] if steps and len(set(steps.values())) == 1 else steps


def run_reference(setting: str, fraction: float, seed: int, data_dir: Path, root: Path) -> dict[str, Any]:
    dataset, parties = parse_setting(setting)
    rows = job_rows(root, seed, JobConfig.val_fraction, [f"site-{i + 1}" for i in range(parties)], fraction)
    start = time.perf_counter()
    result = trees(rows.train_ids, rows, source_table(data_dir, dataset), seed)
    result["metrics"] = {k: round(v, DIGITS) for k, v in result["metrics"].items()}
    return {
        "setting": setting,
        "fraction": fraction,
        "seed": seed,
        "method": REFERENCE,
        **result,
        "wall_s": round(time.perf_counter() - start, 1),
    }


def run_group(task: tuple) -> list[dict[str, Any]]:
    """All methods of one (setting, seed, fraction), in one process, so the pretraining is shared."""
    setting, fraction, seed, methods, overrides, data_dir, splits, variant, cached = task
    limit_threads()
    dataset, parties = parse_setting(setting)
    root = prepare_all_shared_split(data_dir, dataset, parties, seed, splits)
    records = []
    for method in methods:
        record = (
            run_reference(setting, fraction, seed, data_dir, root)
            if method == REFERENCE
            else run_one(method, setting, fraction, seed, overrides, root, cached)
        )
        record.update(variant=variant, set=overrides, env=environment_record())
        print(
            f"{setting} {fraction:.2f} seed {seed} {method}: test AUC {record['metrics']['test_auc']:.4f}, "
            f"{record.get('training_mb', 0):.2f} MB, {record['wall_s']} s",
            flush=True,
        )
        records.append(record)
    return records


def write_record(path: Path, record: dict) -> None:
    """append_jsonl without spaces, null or empty fields: the results file is committed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(
            json.dumps(
                {k: v for k, v in record.items() if v not in (None, [])}, ensure_ascii=False, separators=(",", ":")
            )
            + "\n"
        )


# ------------------------------------------------------------------------------------------- tables
def mb_to_reach(record: dict, target: float) -> float | None:
    if record["method"] == "ssvfl_i":
        return record["training_mb"] if record["metrics"]["test_auc"] >= target else None
    return next((mb for mb, auc in record["curve"] if auc >= target), None)


def target_of(by_method: dict[str, list[dict]], pick: Any = min) -> float:
    """pick (min or max) over the methods of their mean final test AUC, rounded down to 0.005."""
    level = pick(np.mean([r["metrics"]["test_auc"] for r in rows]) for rows in by_method.values())
    return math.floor(level * 200) / 200


def _cost_cell(records: list[dict], target: float) -> str:
    reached = [mb for mb in (mb_to_reach(r, target) for r in records) if mb is not None]
    if not reached:
        return "-"
    cell = mean_std(reached, 2)
    return cell if len(reached) == len(records) else f"{cell} ({len(reached)}/{len(records)})"


def main_tables(records: list[dict]) -> list[tuple[str, str]]:
    """(title, table) of Fig. 3 and Table 1 over these records (one variant), as in the report."""
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r["setting"], r["fraction"])][r["method"]].append(r)
    columns = [*METHODS, REFERENCE]
    head = "| setting | labeled | "
    accuracy = [head + " | ".join(LABELS[m] for m in columns) + " | seeds |", "|---|---|" + "---|" * (len(columns) + 1)]
    spent = [
        head + " | ".join(f"{LABELS[m]} MB" for m in METHODS) + " | VFL epochs | SS-VFL-C epochs |",
        "|---|---|" + "---|" * (len(METHODS) + 2),
    ]
    cost = {
        pick: [
            head + "target AUC | " + " | ".join(f"{LABELS[m]} MB" for m in METHODS) + " |",
            "|---|---|---|" + "---|" * len(METHODS),
        ]
        for pick in (min, max)
    }
    for (setting, fraction), by_method in sorted(groups.items()):
        row = f"| {setting} | {fraction:.0%} | "
        seeds = sorted({r["seed"] for rows in by_method.values() for r in rows})
        accuracy.append(
            row
            + " | ".join(mean_std([r["metrics"]["test_auc"] for r in by_method.get(m, [])]) for m in columns)
            + f" | {','.join(map(str, seeds))} |"
        )
        if not all(by_method.get(m) for m in METHODS):
            continue
        epochs = [mean_std([float(r["split_epochs"]) for r in by_method[m]], 0) for m in ("vanilla", "ssvfl_c")]
        spent.append(
            row
            + " | ".join(mean_std([r["training_mb"] for r in by_method[m]], 2) for m in METHODS)
            + f" | {epochs[0]} | {epochs[1]} |"
        )
        for pick, lines in cost.items():
            target = target_of({m: by_method[m] for m in METHODS}, pick)
            lines.append(
                row + f"{target:.3f} | " + " | ".join(_cost_cell(by_method[m], target) for m in METHODS) + " |"
            )
    return [
        ("Test AUC (mean ± std over seeds)", "\n".join(accuracy)),
        ("Training payload of the whole run (MB, all sites; split NN stops early, patience 20)", "\n".join(spent)),
        (
            "Training payload (MB) to reach a target every method reaches on average (lowest mean AUC)",
            "\n".join(cost[min]),
        ),
        ("Training payload (MB) to reach the best method's mean AUC", "\n".join(cost[max])),
    ]


def tuning_table(records: list[dict]) -> str:
    """SS-VFL-I's validation AUC per pretraining setting (TUNING_ROWS) and dataset; the best of a column
    (at the 3 decimals shown) in bold."""
    val = {
        (r["variant"], r["setting"]): r["metrics"]["val_auc"]
        for r in records
        if r["variant"] in TUNING and r["method"] == "ssvfl_i"
    }
    best = {s: max((v for (_, setting), v in val.items() if setting == s), default=None) for s in TUNING_SETTINGS}

    def cell(setting: str, cells: list[dict]) -> str:
        values = [val.get((tuning_variant(o), setting)) for o in cells]
        if all(v is None for v in values):
            return "not run"
        shown = [None if v is None else f"{v:.3f}" for v in values]
        return " / ".join("-" if v is None else f"**{v}**" if v == f"{best[setting]:.3f}" else v for v in shown)

    names = {"credit_default:2": "credit default", "adult:2": "Adult"}
    lines = [
        "| pretraining | " + " | ".join(f"{names.get(s, s)} val AUC" for s in TUNING_SETTINGS) + " |",
        "|---|" + "---|" * len(TUNING_SETTINGS),
    ]
    lines += [
        f"| {label} | " + " | ".join(cell(s, cells) for s in TUNING_SETTINGS) + " |" for label, cells in TUNING_ROWS
    ]
    return "\n".join(lines)


def tables(records: list[dict]) -> str:
    """The report's tables in its order: the four main tables (variant "default"), the tuning table;
    then the four main tables of any other variant."""
    by_variant: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_variant[r["variant"]].append(r)
    parts = main_tables(by_variant.get(DEFAULT, []))
    parts.append(
        (
            f"Pretraining settings: SS-VFL-I validation AUC, {TUNING_FRACTION:.0%} labeled, split seed {TUNING_SEED}",
            tuning_table(records),
        )
    )
    for variant in sorted(set(by_variant) - {DEFAULT} - set(TUNING)):
        parts += [(f"variant {variant}: {title}", table) for title, table in main_tables(by_variant[variant])]
    return "\n\n".join(f"{title}\n\n{table}" for title, table in parts)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (variant, setting, seed, fraction) group's methods not yet in `out`, `workers` groups at once."""
    settings = spec.settings
    if settings["tuning"]:
        plans = [
            (variant, overrides, TUNING_SETTINGS, [TUNING_FRACTION], [TUNING_SEED], ["ssvfl_i"])
            for variant, overrides in TUNING.items()
        ]
    else:
        variant, overrides = settings["variant"], dict(settings["job"])
        if variant in TUNING or (variant == DEFAULT and overrides):
            raise ValueError(f"name job overrides with --set variant=NAME (not {variant!r})")
        plans = [(variant, overrides, spec.datasets, settings["fractions"], spec.seeds, spec.methods)]
    done = {(r["variant"], r["setting"], r["fraction"], r["seed"], r["method"]) for r in read_jsonl(out)}
    tasks = []
    for variant, overrides, setting_names, fractions, seeds, methods in plans:
        for setting in setting_names:
            for seed in seeds:
                for fraction in fractions:
                    todo = [m for m in methods if (variant, setting, fraction, seed, m) not in done]
                    if todo:
                        cached = settings["pretrain_cache"]
                        tasks.append((setting, fraction, seed, todo, overrides, data_dir, SPLITS, variant, cached))
    # splits first, in this process, so parallel workers never write the same folder
    for setting, seed in {(t[0], t[2]) for t in tasks}:
        prepare_all_shared_split(data_dir, *parse_setting(setting), seed, SPLITS)
    with multiprocessing.get_context("spawn").Pool(settings["workers"]) as pool:
        for records in pool.imap_unordered(run_group, tasks):
            for record in records:
                write_record(out, record)


@table("ssvfl")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="ssvfl",
        about="SS-VFL-I and SS-VFL-C against supervised VFL with few labels (SSVFL_REPORT.md)",
        runner=run,
        datasets=tuple(SETTINGS),
        methods=(*METHODS, REFERENCE),
        seeds=(0, 1, 2),
        settings={
            "fractions": tuple(FRACTIONS),  # labeled fractions of the training rows
            "variant": DEFAULT,  # the name its job overrides are recorded under
            "job": {},  # config overrides
            "tuning": False,  # run the tuning table's variants instead (SS-VFL-I, 25 % labeled, seed 100)
            "workers": 1,  # parallel processes (one torch thread each)
            "pretrain_cache": True,  # reuse the (setting, seed, fraction) encoders across SS-VFL variants
        },
        records="ssvfl.jsonl",
    )
)
