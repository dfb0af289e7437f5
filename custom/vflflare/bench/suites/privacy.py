"""What a party learns against an attacker who knows the code, and what stopping it costs (issue 36; the grid
of issue 27 rerun with the adaptive attack suite and private defense randomness): every algorithm undefended
and under each defense it has a channel for, at strengths named before any run, with every attack that
applies (vflflare.attacks.run: each attack reads only what its party received, and the attacker knows
the code and the whole job configuration, the job seed included).

Cell: credit default, 2 parties, N_o 1000 (`vflflare split --overlap 1000 --seed S`; VFLHLP on its own split
with the labels at site-1, `--label-owner site-1 --active-site-labels`), split seed = job seed.
Package defaults, except FedHSSL's 10 global iterations (as in FEDHSSL_REPORT §5; 40 take ~8 min a run).
Records: results/privacy_adaptive.jsonl (CREDIT_RESULTS), one line per run.

The grid (GRID, named before any run; each row only where the algorithm has the channel, so SS-VFL-I, which
sends its sites nothing computed from the labels, has the representation row only):
- undefended;
- label_dp_epsilon 1, 4 (randomized response on the aligned training labels);
- gradient_clip 1 + gradient_normalize (every gradient row scaled to norm exactly 1) + gradient_noise 1, 3;
- gradient_clip 1 + gradient_normalize + gradient_dp_epsilon 2, 8 at gradient_dp_delta 1e-5 (the label party
  sets the noise for the job's planned passes, privacy/accounting.py);
- gradient_marvell 1, 4 (Marvell's power budget as a multiple of |Delta|^2);
- representation_noise 1.
No setting depends on an undefended run.

Private randomness: each run sets VFLFLARE_PRIVATE_SEED in its worker process, before the run, to
"privacy-bench:{algorithm}:{seed}:{row}" (row: the grid row's name, "none" undefended), so the defenses'
draws repeat from run to run while the attacker, who knows the job seed, does not know them. It is the
benchmark's private seed: it never goes in the job configuration, and records say only which kind of
private source each party used (`privacy.private_randomness`).

Leak of a run = attack_run's leak["strongest"]: the maximum over every label attack on what a site received
(gradients, probabilities; model completion is reported beside its own-columns prior, not in it).

The rule (fixed in advance, on validation AUC only): per algorithm, among the defended rows whose median
(seeds 0-2) strongest leak is <= 0.60, the one with the highest median validation AUC. Where no row meets
it, the best trade-off row: the lowest median strongest leak among the rows whose median validation AUC is
at most 0.02 below the undefended one ("goal not met"). `--confirm` reruns that row and the undefended one
on seeds 3-5, which played no part in choosing it; there the goal is met when the median strongest leak is
<= 0.60 at a test AUC cost <= 0.02 (one-shot's own goal, issue 36: leak <= 0.65 at test AUC >= 0.70, is
reported beside it; the rule is the same for every algorithm).

Second cell (suite privacy_mnist, records in privacy_mnist_adaptive.jsonl; not run with the adaptive suite yet,
issue 27's withdrawn records are privacy_mnist.jsonl):
MNIST halves, small, as IMAGES_REPORT's CPU table (N_o 256, 1500 training and 1000 test images per split,
the images suite's SCALES["cpu"] settings). Ten classes, so the label attacks score the share of rows whose label
they recover (beside the majority-class rate), and Marvell (binary) is left out.

    vflflare bench run privacy --committed --set workers=2
    vflflare bench run privacy --committed --set confirm=true --seeds 3 4 5 --set workers=2
    vflflare bench tables        # PRIVACY_REPORT.md's and the README's tables from the committed records

A run ends with the tables of its records and the plot (benchmarks/privacy_credit_default.png for the
committed records, else beside them); a run with nothing left to do only prints and draws them.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from vflflare.bench.inprocess import limit_threads
from vflflare.bench.paths import BENCHMARKS, COMMITTED, DEFAULT_SPLITS
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import SourceTable, prepare_split
from vflflare.bench.suite import Suite, suite
from vflflare.bench.suites import images
from vflflare.bench.tables import register

CREDIT_RESULTS = COMMITTED / "privacy_adaptive.jsonl"  # credit default, the adaptive suite (issue 36)
# MNIST with the adaptive suite: a file of its own, so a rerun never resumes into issue 27's privacy_mnist.jsonl
MNIST, MNIST_RESULTS, MNIST_OVERLAP = "mnist", COMMITTED / "privacy_mnist_adaptive.jsonl", 256
PLOT = BENCHMARKS / "privacy_credit_default.png"
MNIST_PLOT = BENCHMARKS / "privacy_mnist.png"
OVERLAP = 1000
ALGORITHMS: dict[str, dict[str, Any]] = {
    "oneshot": {},
    "fewshot": {},
    "vanilla": {},
    "fedbcd": {},
    "ssvfl_i": {},
    "ssvfl_c": {},
    "vflhlp": {"label_owner": "site-1"},
    "fedhssl": {"global_iterations": 10},
}
NORMALIZED = {"gradient_clip": 1.0, "gradient_normalize": True}
# the grid: (row name, settings, the channels of which the algorithm needs one), in table order
GRID: list[tuple[str, dict[str, Any], frozenset[str]]] = [
    ("none", {}, frozenset()),
    *(
        (f"label_dp_epsilon {e:g}", {"label_dp_epsilon": e}, frozenset({"gradients", "probabilities"}))
        for e in (1.0, 4.0)
    ),
    *((f"gradient_noise {z:g}", {**NORMALIZED, "gradient_noise": z}, frozenset({"gradients"})) for z in (1.0, 3.0)),
    *(
        (
            f"gradient_dp_epsilon {e:g}",
            {**NORMALIZED, "gradient_dp_epsilon": e, "gradient_dp_delta": 1e-5},
            frozenset({"gradients"}),
        )
        for e in (2.0, 8.0)
    ),
    *((f"gradient_marvell {s:g}", {"gradient_marvell": s}, frozenset({"gradients"})) for s in (1.0, 4.0)),
    ("representation_noise 1", {"representation_noise": 1.0}, frozenset({"representations"})),
]
ROW_ORDER = [name for name, _, _ in GRID]
# the adaptive suite's label attacks, in table order (a column only where some run has it)
ATTACKS = (
    "gradient_norm",
    "gradient_direction",
    "gradient_clusters",
    "known_init_projection",
    "multi_pass_norm",
    "multi_pass_direction",
    "multi_pass_clusters",
    "seed_replay_gradients",
    "seed_replay_label_dp",
    "probability_clusters",
)
GOAL_LEAK = 0.60  # the rule's leak bound (median strongest leak, seeds 0-2)
GOAL_COST = 0.02  # the most AUC a defense may cost (validation for the trade-off row; test on seeds 3-5)
ONESHOT_GOAL = (0.65, 0.70)  # issue 36's goal for one-shot: strongest leak <= 0.65 at test AUC >= 0.70
CHOSEN_ON, FRESH = frozenset({0, 1, 2}), frozenset({3, 4, 5})


def channels(algorithm: str) -> frozenset[str]:
    from vflflare.registry import get_algorithm

    return get_algorithm(algorithm).Config.privacy_channels


def split_root(algorithm: str, seed: int, data_dir: Path, dataset: str = "credit_default") -> Path:
    owner = ALGORITHMS[algorithm].get("label_owner")
    if dataset != MNIST:
        return prepare_split(data_dir, OVERLAP, seed, DEFAULT_SPLITS, label_owner=owner, active_site_labels=bool(owner))
    return images.prepare_image_split("cpu", MNIST, MNIST_OVERLAP, seed, data_dir, DEFAULT_SPLITS, owner)


def cell_settings(algorithm: str, dataset: str) -> dict[str, Any]:
    """The algorithm's settings in the cell: the package defaults on credit default, IMAGES_REPORT's CPU
    scale on MNIST."""
    if dataset != MNIST:
        return dict(ALGORITHMS[algorithm])
    return {**images.method_settings("cpu", algorithm), **ALGORITHMS[algorithm]}


def truth(data_dir: Path, dataset: str) -> dict[str, int]:
    """Every training row's true label by ID: what few-shot's probability attack is scored against."""
    if dataset != MNIST:
        return SourceTable(data_dir).labels.to_dict()
    from vflflare.data.image_sources import load_image_source

    labels = load_image_source(MNIST, data_dir).train_labels
    return {f"{MNIST}-train-{i:05d}": int(label) for i, label in enumerate(labels)}


def compact(value: Any) -> Any:
    """Floats to 6 significant digits, recursively: the records of ~300 runs stay a few hundred kB."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compact(v) for v in value]
    return value


def private_seed(algorithm: str, seed: int, row: str, dataset: str = "credit_default") -> str:
    """The benchmark's private seed of one run (VFLFLARE_PRIVATE_SEED in its worker; never in the job)."""
    return f"privacy-bench:{'' if dataset != MNIST else MNIST + ':'}{algorithm}:{seed}:{row}"


def privacy_of(result: dict[str, Any]) -> dict[str, Any]:
    """The run's privacy record (private-source kinds, the DP accounting), less the streams' prose."""
    record = result.get("privacy", {})
    dp = record.get("dp", {})
    streams = {
        name: {k: v for k, v in stream.items() if k != "covers"} for name, stream in dp.get("streams", {}).items()
    }
    return {
        "private_randomness": record.get("private_randomness", {}),
        **({"dp": {"streams": streams, "no_guarantee": dp.get("no_guarantee", [])}} if dp else {}),
    }


def run_one(
    algorithm: str, seed: int, row: str, defense: dict[str, Any], data_dir: Path, dataset: str = "credit_default"
) -> dict[str, Any]:
    from vflflare.attacks.run import attack_run
    from vflflare.privacy.private_randomness import PRIVATE_SEED_ENV
    from vflflare.registry import make_config

    limit_threads()
    os.environ[PRIVATE_SEED_ENV] = private_seed(algorithm, seed, row, dataset)
    root = split_root(algorithm, seed, data_dir, dataset)
    settings = {**cell_settings(algorithm, dataset), **defense}
    cfg = make_config({"algorithm": algorithm, "seed": seed, **settings})
    start = time.monotonic()
    result = attack_run(cfg, ["site-1", "site-2"], str(root), unaligned_labels=truth(data_dir, dataset))
    per_site = result["communication"]["per_site"]
    return compact(
        {
            "algorithm": algorithm,
            "seed": seed,
            "row": row,
            "overlap": MNIST_OVERLAP if dataset == MNIST else OVERLAP,
            **({"dataset": dataset} if dataset == MNIST else {}),
            "defenses": result["defenses"],
            "settings": settings,
            "metrics": result["metrics"],
            "leak": result["leak"],
            **({"optimal_leak_bound": result["optimal_leak_bound"]} if "optimal_leak_bound" in result else {}),
            "privacy": privacy_of(result),
            "gradient_norm_median": result["gradient_norm_median"],
            "majority": result["majority"],
            "mb_per_site": max(v["payload_bytes"] for v in per_site.values()) / 1e6,
            "wall_s": round(time.monotonic() - start, 1),
            "env": environment_record(),
        }
    )


def defense_rows(algorithm: str, binary: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """The grid's rows of one algorithm, undefended first: each defense it has a channel for (Marvell only
    for binary labels)."""
    have = channels(algorithm)
    return [
        (name, dict(settings))
        for name, settings, need in GRID
        if (not need or need & have) and (binary or "gradient_marvell" not in settings)
    ]


def key(record: dict) -> tuple:
    return run_key(record["algorithm"], record["seed"], record["settings"])


def run_key(algorithm: str, seed: int, settings: dict[str, Any]) -> tuple:
    """A run's identity: its settings as sorted JSON (an image cell's settings hold nested values)."""
    return algorithm, seed, json.dumps(settings, sort_keys=True)


def run_all(
    algorithms: list[str],
    seeds: list[int],
    data_dir: Path,
    out: Path,
    workers: int,
    confirm: bool,
    dataset: str = "credit_default",
) -> None:
    """Every run of the grid (or, with `confirm`, of the undefended and chosen rows) not yet in `out`: an
    interrupted run goes on where it stopped."""
    done = {key(r) for r in read_jsonl(out)}
    binary = dataset != MNIST
    if confirm:
        chosen = recommendations(read_jsonl(out), binary=binary)
        missing = [a for a in algorithms if a not in chosen]
        if missing:
            print(f"no row chosen (grid incomplete on seeds 0-2, or no label channel): {', '.join(missing)}")
        rows = {a: dict(defense_rows(a, binary)) for a in algorithms}
        jobs = [
            (a, s, name, rows[a][name])
            for a in algorithms
            if a in chosen
            for s in seeds
            for name in ("none", chosen[a]["row"])
        ]
    else:
        jobs = [(a, s, name, d) for a in algorithms for s in seeds for name, d in defense_rows(a, binary)]
    todo = [j for j in jobs if run_key(j[0], j[1], {**cell_settings(j[0], dataset), **j[3]}) not in done]
    print(f"{len(todo)} runs to do ({len(jobs) - len(todo)} already in {out.name})", flush=True)
    for algorithm, seed in dict.fromkeys((j[0], j[1]) for j in todo):  # here, so two workers never write one split
        split_root(algorithm, seed, data_dir, dataset)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [(j, pool.submit(run_one, j[0], j[1], j[2], j[3], data_dir, dataset)) for j in todo]
        for (algorithm, seed, row, _), future in futures:
            try:
                record = future.result()
            except Exception as error:  # noqa: BLE001 - one failed run is reported, the rest go on
                print(f"FAILED {algorithm} seed {seed} {row}: {error!r}", flush=True)
                continue
            append_jsonl(out, record)
            print(
                f"{algorithm} seed {seed} {row}: {record['metrics']} strongest {record['leak'].get('strongest')} "
                f"({record['wall_s']} s)",
                flush=True,
            )


# ------------------------------------------------------------------ tables
def strongest(record: dict) -> float | None:
    """The run's leak: attack_run's maximum over every label attack on what a site received."""
    return record["leak"].get("strongest")


def median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def groups(records: list[dict], seeds: frozenset[int] | set[int]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        if r["seed"] in seeds:
            out.setdefault((r["algorithm"], r["row"]), []).append(r)
    return out


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def grid_complete(by: dict[tuple[str, str], list[dict]], algorithm: str, seeds: int, binary: bool = True) -> bool:
    """Every row of the algorithm has a run for every seed."""
    return all(len(by.get((algorithm, name), [])) == seeds for name, _ in defense_rows(algorithm, binary))


def med(runs: list[dict], get) -> float | None:
    return median([get(r) for r in runs])


def val(r: dict) -> float | None:
    return r["metrics"].get("val_auc")


def test(r: dict) -> float | None:
    return r["metrics"].get("test_auc")


def recommendations(records: list[dict], seeds: frozenset[int] = CHOSEN_ON, binary: bool = True) -> dict[str, dict]:
    """Per algorithm whose grid is complete on `seeds`: the rule's choice (`meets`: True), the defended row of
    highest median val AUC among those whose median strongest leak is <= GOAL_LEAK; where none is, the best
    trade-off row (`meets`: False), the lowest median strongest leak among rows whose median val AUC is at most
    GOAL_COST below the undefended one. An algorithm without a label channel (no strongest leak) gets none."""
    by = groups(records, seeds)
    chosen: dict[str, dict] = {}
    for algorithm in ALGORITHMS:
        if (algorithm, "none") not in by or not grid_complete(by, algorithm, len(seeds), binary):
            continue  # a rule applied to part of the grid picks nothing
        base_val = med(by[(algorithm, "none")], val)
        rows = [
            (name, med(by[(algorithm, name)], strongest), med(by[(algorithm, name)], val))
            for name, _ in defense_rows(algorithm, binary)
            if name != "none"
        ]
        rows = [(name, leak, v) for name, leak, v in rows if leak is not None and v is not None]
        meeting = [row for row in rows if row[1] <= GOAL_LEAK]
        if meeting:
            name, leak, v = max(meeting, key=lambda row: row[2])
            chosen[algorithm] = {"row": name, "val": v, "leak": leak, "meets": True}
            continue
        cheap = [row for row in rows if base_val is not None and row[2] >= base_val - GOAL_COST]
        if cheap:
            name, leak, v = min(cheap, key=lambda row: (row[1], -row[2]))
            chosen[algorithm] = {"row": name, "val": v, "leak": leak, "meets": False}
    return chosen


def epsilon(record: dict) -> float | None:
    """The label-DP epsilon the run spent: its gradients stream's, else its labels stream's; None without one."""
    streams = record.get("privacy", {}).get("dp", {}).get("streams", {})
    for name in ("gradients", "labels"):
        if name in streams:
            return streams[name]["epsilon"]
    return None


def top_model_uncovered(runs: list[dict]) -> bool:
    """The accounting says the split NN's trained top model carries labels its gradient epsilon does not cover."""
    return any("top model" in note for r in runs for note in r.get("privacy", {}).get("dp", {}).get("no_guarantee", []))


def fmt_eps(runs: list[dict]) -> str:
    eps = med(runs, epsilon)
    if eps is None:
        return "-"
    return f"{eps:.2f}" + ("†" if "gradient" in runs[0]["row"] and top_model_uncovered(runs) else "")


def attack_columns(records: list[dict]) -> list[str]:
    return [a for a in ATTACKS if any(r["leak"].get(a) is not None for r in records)]


def rows_in_order(by: dict[tuple[str, str], list[dict]]):
    """(algorithm, row, its runs, the undefended runs), undefended first, in table order."""
    for algorithm in ALGORITHMS:
        base = by.get((algorithm, "none"))
        if not base:
            continue
        for name in ROW_ORDER:
            if (algorithm, name) in by:
                yield algorithm, name, by[(algorithm, name)], base


def main_table(records: list[dict]) -> str:
    """Seeds 0-2, medians: per algorithm and row, test AUC and its change, each adaptive attack's leak, the
    strongest, the optimal test's bound, the epsilon spent, model completion, reconstruction, MB per site."""
    by = groups(records, CHOSEN_ON)
    attacks = attack_columns([r for runs in by.values() for r in runs])
    head = [
        "algorithm",
        "defense",
        "test AUC",
        "Δ test AUC",
        *attacks,
        "strongest",
        "optimal_leak_bound",
        "eps",
        "MC 200 / own columns",
        "reconstruction R²",
        "MB / site",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algorithm, name, runs, base in rows_in_order(by):
        mp, mp_star = med(runs, test), med(base, test)
        mc = (
            f"{fmt(med(runs, lambda r: r['leak'].get('model_completion_200')))} / "
            f"{fmt(med(runs, lambda r: r['leak'].get('model_completion_200_own_columns')))}"
        )
        cells = [
            algorithm,
            name,
            fmt(mp),
            f"{mp - mp_star:+.3f}",
            *(fmt(med(runs, lambda r, a=a: r["leak"].get(a))) for a in attacks),
            fmt(med(runs, strongest)),
            fmt(med(runs, lambda r: r.get("optimal_leak_bound"))),
            fmt_eps(runs),
            mc,
            fmt(med(runs, lambda r: r["leak"].get("feature_reconstruction")), 2),
            f"{med(runs, lambda r: r['mb_per_site']):.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fresh_result(fresh: dict, algorithm: str, name: str) -> tuple[float, float, float | None, float | None] | None:
    """Seeds 3-5: (undefended test AUC, defended test AUC, undefended strongest leak, defended strongest leak)."""
    base, runs = fresh.get((algorithm, "none")), fresh.get((algorithm, name))
    if not base or not runs or len(base) < len(FRESH) or len(runs) < len(FRESH):
        return None
    return med(base, test), med(runs, test), med(base, strongest), med(runs, strongest)


def goal_met(leak: float | None, cost: float) -> bool:
    return leak is not None and leak <= GOAL_LEAK and cost >= -GOAL_COST


def oneshot_goal(leak: float | None, auc: float) -> bool:
    return leak is not None and leak <= ONESHOT_GOAL[0] and auc >= ONESHOT_GOAL[1]


def confirm_table(records: list[dict]) -> str:
    """Seeds 3-5: the row the rule chose on seeds 0-2 (or the best trade-off row where none met it) beside
    the undefended run; goal met: median strongest leak <= 0.60 at a test AUC cost <= 0.02."""
    chosen, fresh = recommendations(records), groups(records, FRESH)
    head = [
        "algorithm",
        "row (chosen on seeds 0-2, validation)",
        "met the rule on seeds 0-2",
        "test AUC, undefended",
        "test AUC, defended",
        "Δ",
        "strongest leak, undefended",
        "strongest leak, defended",
        "eps",
        "goal met",
        "one-shot goal (leak <= 0.65, test AUC >= 0.70)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algorithm in ALGORITHMS:
        if algorithm not in chosen:
            continue
        name = chosen[algorithm]["row"]
        got = fresh_result(fresh, algorithm, name)
        if got is None:
            continue
        mp_star, mp, leak0, leak = got
        one = ("yes" if oneshot_goal(leak, mp) else "no") if algorithm == "oneshot" else "-"
        lines.append(
            f"| {algorithm} | {name} | {'yes' if chosen[algorithm]['meets'] else 'no (trade-off row)'} | "
            f"{fmt(mp_star)} | {fmt(mp)} | {mp - mp_star:+.3f} | {fmt(leak0)} | {fmt(leak)} | "
            f"{fmt_eps(fresh[(algorithm, name)])} | {'yes' if goal_met(leak, mp - mp_star) else 'no'} | {one} |"
        )
    return "\n".join(lines)


RECEIVED = {"gradients": "per-row gradients", "probabilities": "p^ of its unaligned rows"}


def summary_table(records: list[dict]) -> str:
    """Per algorithm, for the README: what a site without labels receives, the strongest adaptive leak
    undefended (seeds 0-2), and the rule's row (or the best trade-off row, "goal not met") with its epsilon,
    its test AUC cost and its strongest leak on the fresh seeds 3-5."""
    base, fresh, chosen = groups(records, CHOSEN_ON), groups(records, FRESH), recommendations(records)
    head = [
        "algorithm",
        "a site without labels receives",
        "strongest adaptive label leak, undefended",
        "recommended defense",
        "eps (†: not covering the split NN's top model)",
        "test AUC cost (seeds 3-5)",
        "strongest leak with it (seeds 3-5)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algorithm in ALGORITHMS:
        runs = base.get((algorithm, "none"))
        if not runs:
            continue
        got = ", ".join(RECEIVED[c] for c in sorted(channels(algorithm)) if c in RECEIVED) or "nothing from the labels"
        leak = med(runs, strongest)
        setting, eps, cost, defended = "none needed (no label channel)" if leak is None else "-", "-", "-", "-"
        if algorithm in chosen:
            name = chosen[algorithm]["row"]
            setting = name
            result = fresh_result(fresh, algorithm, name)
            if result is not None:
                mp_star, mp, _, leak1 = result
                cost, defended, eps = f"{mp - mp_star:+.3f}", fmt(leak1), fmt_eps(fresh[(algorithm, name)])
                if not chosen[algorithm]["meets"] or not goal_met(leak1, mp - mp_star):
                    setting += " (goal not met)"
            elif not chosen[algorithm]["meets"]:
                setting += " (goal not met)"
        lines.append(f"| {algorithm} | {got} | {fmt(leak)} | {setting} | {eps} | {cost} | {defended} |")
    return "\n".join(lines)


def frontier_table(records: list[dict]) -> str:
    """Seeds 0-2, medians: per algorithm, every row's test AUC change and strongest leak ('Δ / leak'; '-': not
    in the algorithm's grid), what each defense buys and costs side by side."""
    by = groups(records, CHOSEN_ON)
    lines = ["| algorithm | " + " | ".join(ROW_ORDER) + " |", "|---|" + "---|" * len(ROW_ORDER)]
    for algorithm in ALGORITHMS:
        base = by.get((algorithm, "none"))
        if not base:
            continue
        mp_star, cells = med(base, test), []
        for name in ROW_ORDER:
            runs = by.get((algorithm, name))
            cells.append(f"{med(runs, test) - mp_star:+.3f} / {fmt(med(runs, strongest))}" if runs else "-")
        lines.append(f"| {algorithm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables(records: list[dict]) -> str:
    """The report's tables, in marker order: grid, confirmation, README summary, frontier."""
    return "\n\n".join([main_table(records), confirm_table(records), summary_table(records), frontier_table(records)])


def mnist_table(records: list[dict]) -> str:
    """MNIST halves: per algorithm and row, test accuracy, the share of rows the label attacks recover
    (beside the majority-class rate), model completion, reconstruction."""
    by = groups(records, CHOSEN_ON)
    attacks = attack_columns([r for runs in by.values() for r in runs])
    head = [
        "algorithm",
        "defense",
        "seeds",
        "test acc",
        "Δ test acc",
        *attacks,
        "strongest",
        "MC 200 / own columns",
        "majority rate",
        "reconstruction R²",
        "MB / site",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for algorithm, name, runs, base in rows_in_order(by):
        mp = med(runs, lambda r: r["metrics"]["test_accuracy"])
        mp_star = med(base, lambda r: r["metrics"]["test_accuracy"])
        cells = [
            algorithm,
            name,
            ", ".join(str(r["seed"]) for r in sorted(runs, key=lambda r: r["seed"])),
            fmt(mp),
            f"{mp - mp_star:+.3f}",
            *(fmt(med(runs, lambda r, a=a: r["leak"].get(a))) for a in attacks),
            fmt(med(runs, strongest)),
            f"{fmt(med(runs, lambda r: r['leak'].get('model_completion_200')))} / "
            f"{fmt(med(runs, lambda r: r['leak'].get('model_completion_200_own_columns')))}",
            fmt(med(runs, lambda r: r["majority"]["aligned"])),
            fmt(med(runs, lambda r: r["leak"].get("feature_reconstruction")), 2),
            f"{med(runs, lambda r: r['mb_per_site']):.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(records: list[dict], path: Path = PLOT, mnist: bool = False) -> Path:
    """Per algorithm, every row: its strongest label leak against its utility (medians, seeds 0-2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = "test_accuracy" if mnist else "test_auc"
    by = groups(records, CHOSEN_ON)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for algorithm in ALGORITHMS:
        points = sorted(
            (med(runs, strongest), med(runs, lambda r: r["metrics"][metric]))
            for (a, _), runs in by.items()
            if a == algorithm
        )
        points = [p for p in points if p[0] is not None]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], "o", label=algorithm, alpha=0.8)
    if mnist:
        xlabel, title = (
            "strongest label attack: share of aligned rows whose label it recovers",
            "MNIST halves, N_o 256: every row, median over seeds 0-2",
        )
        ylabel = "test accuracy"
    else:
        ax.axvline(GOAL_LEAK, color="grey", ls="--", lw=0.8)
        xlabel, title, ylabel = (
            "strongest adaptive label leak (AUC scale, 0.5 = chance)",
            "credit default, N_o 1000: every row, median over seeds 0-2",
            "test AUC",
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """The grid's runs (with `confirm`: the undefended and chosen rows) not yet in `out`, then the tables of
    `out` and the plot."""
    dataset = spec.datasets[0]
    settings = spec.settings
    run_all(list(spec.methods), list(spec.seeds), data_dir, out, settings["workers"], settings["confirm"], dataset)
    records = read_jsonl(out)
    mnist = dataset == MNIST
    print(mnist_table(records) if mnist else tables(records))
    committed = out.resolve() == (MNIST_RESULTS if mnist else CREDIT_RESULTS).resolve()
    path = (MNIST_PLOT if mnist else PLOT) if committed else out.with_name((MNIST_PLOT if mnist else PLOT).name)
    print(f"plot: {plot(records, path, mnist=mnist)}")


register("privacy", lambda: tables(read_jsonl(CREDIT_RESULTS)))
register("privacy_mnist", lambda: mnist_table(read_jsonl(MNIST_RESULTS)))

SETTINGS = {"confirm": False, "workers": 1}  # confirm: the undefended and chosen rows only; workers: processes
suite(
    Suite(
        name="privacy",
        about="every algorithm against the adaptive attacks, undefended and under each defense (PRIVACY_REPORT.md)",
        runner=run,
        datasets=("credit_default",),
        methods=tuple(ALGORITHMS),
        seeds=tuple(sorted(CHOSEN_ON)),
        settings=SETTINGS,
        records=CREDIT_RESULTS.name,
    )
)
suite(
    Suite(
        name="privacy_mnist",
        about="the privacy grid on MNIST halves at the images suite's CPU scale (PRIVACY_REPORT.md)",
        runner=run,
        datasets=(MNIST,),
        methods=tuple(ALGORITHMS),
        seeds=tuple(sorted(CHOSEN_ON)),
        settings=SETTINGS,
        records=MNIST_RESULTS.name,
    )
)
