"""The leaderboard from `vflflare bench` records: a Markdown table (median test AUC over seeds per method
and overlap, with the per-seed values; traffic per site), a CSV of every record, and three plots
(matplotlib, PNG): test AUC against communication MB and against the number of communications per site
(the one-shot paper's Fig. 6-7), and test AUC against the overlap N_o."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.bench import folder
from vflflare.bench.grid import METHODS, BenchSpec
from vflflare.bench.records import read_jsonl

RESULTS = "results.jsonl"
UNRECORDED = "settings not recorded"  # records from before records carried their settings


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def cells(records: list[dict]) -> dict[tuple[str, str, int], list[dict]]:
    """(dataset, method, overlap) -> its records, seeds ascending."""
    out: dict[tuple[str, str, int], list[dict]] = defaultdict(list)
    for r in sorted(records, key=lambda r: r["seed"]):
        out[(r["dataset"], r["method"], r["overlap"])].append(r)
    return out


def _methods(by: dict, dataset: str) -> list[str]:
    """The methods with records on `dataset`, in leaderboard order."""
    return [m for m in METHODS if any(k[0] == dataset and k[1] == m for k in by)]


def _flag(flag: str, value: Any) -> str:
    """One option as a user types it: `--set k=v`, `--sim`, `--ensemble 3`."""
    text = value if isinstance(value, str) else json.dumps(value)
    if flag.startswith("--set "):
        return f"{flag}={text}"
    return flag if value is True else f"{flag} {text}"


def setting_label(record: dict) -> str:
    """The options a record ran with beyond the bench's defaults ('' for none), so runs with other
    settings get tables of their own, named by their options."""
    if "settings" not in record:
        return UNRECORDED
    defaults = folder.as_flags(BenchSpec().folder_settings())
    flags = folder.as_flags({k: record[k] for k in folder.KEYS})
    return ", ".join(_flag(k, v) for k, v in flags.items() if defaults.get(k) != v)


def provenance_line(records: list[dict]) -> str:
    """The commits and environments behind a table, each named once."""

    def commit(r: dict) -> str:
        state = r.get("git", {})
        name = state.get("commit", "not recorded")[:12]
        return name + (" with uncommitted changes to the package" if state.get("dirty") else "")

    def env(r: dict) -> str:
        e = r.get("env", {})
        libs = ", ".join(f"{k} {v}" for k, v in e.items() if k not in ("platform", "machine", "cpus"))
        return libs + (f"; {e['machine']}" if "machine" in e else "") + (f", {e['cpus']} CPUs" if "cpus" in e else "")

    unique = lambda f: "; ".join(sorted({f(r) for r in records}))  # noqa: E731
    return f"Commit {unique(commit)}. Environment: {unique(env)}."


def groups(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(dataset, setting label) -> its records: one table each."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        out[(r["dataset"], setting_label(r))].append(r)
    return dict(sorted(out.items()))


def markdown(records: list[dict]) -> str:
    """One table per dataset and settings: test AUC per method and overlap, traffic; and where it came from."""
    lines = []
    for (dataset, label), rs in groups(records).items():
        lines += _grid_table(rs, dataset, label) + [provenance_line(rs), ""]
    return "\n".join(lines)


def _grid_table(records: list[dict], dataset: str, label: str) -> list[str]:
    by = cells(records)
    overlaps = sorted({r["overlap"] for r in records})
    seeds = sorted({r["seed"] for r in records})
    lines = [
        f"### {dataset}: test AUC, median over seeds {', '.join(map(str, seeds))} (per seed)"
        + (f"; {label}" if label else ""),
        "",
        "| method | " + " | ".join(f"N_o = {n}" for n in overlaps) + " | MB per site | communications per site |",
        "|---|" + "---|" * (len(overlaps) + 2),
    ]
    for method in _methods(by, dataset):
        row = []
        for n in overlaps:
            aucs = [r["metrics"]["test_auc"] for r in by.get((dataset, method, n), [])]
            row.append(f"{_median(aucs):.3f} ({', '.join(f'{a:.3f}' for a in aucs)})" if aucs else "")
        traffic = [r for n in overlaps for r in by.get((dataset, method, n), []) if r["mb_per_site"] is not None]
        mb = (
            f"{min(r['mb_per_site'] for r in traffic):.2f}-{max(r['mb_per_site'] for r in traffic):.2f}"
            if traffic
            else "-"
        )
        comms = (
            f"{min(r['comms_per_site'] for r in traffic)}-{max(r['comms_per_site'] for r in traffic)}"
            if traffic
            else "-"
        )
        lines.append(f"| {method} | " + " | ".join(row) + f" | {mb} | {comms} |")
    lines.append("")
    return lines


def write_csv(records: list[dict], path: Path) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "dataset",
                "overlap",
                "seed",
                "method",
                "test_auc",
                "val_auc",
                "mb_per_site",
                "comms_per_site",
                "wall_s",
                "settings",
                "job_seeds",
            ]
        )
        for r in records:
            writer.writerow(
                [
                    r["dataset"],
                    r["overlap"],
                    r["seed"],
                    r["method"],
                    r["metrics"].get("test_auc"),
                    r["metrics"].get("val_auc"),
                    r["mb_per_site"],
                    r["comms_per_site"],
                    r["wall_s"],
                    setting_label(r),
                    " ".join(map(str, r.get("job_seeds", []))),
                ]
            )
    return path


def plots(records: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = cells(records)
    written = []
    for dataset in sorted({r["dataset"] for r in records}):
        overlaps = sorted({r["overlap"] for r in records if r["dataset"] == dataset})
        methods = _methods(by, dataset)
        fig, axes = plt.subplots(1, 3, figsize=(17, 5))
        for method in methods:
            style = {"marker": "o", "label": method, "color": plt.cm.tab20(METHODS.index(method) % 20)}
            points = [(n, by[(dataset, method, n)]) for n in overlaps if (dataset, method, n) in by]
            auc = [_median([r["metrics"]["test_auc"] for r in rs]) for _, rs in points]
            axes[2].plot([n for n, _ in points], auc, **style)
            if points and points[0][1][0]["mb_per_site"] is not None:  # baselines: no vflflare traffic
                mb = [_median([r["mb_per_site"] for r in rs]) for _, rs in points]
                comms = [_median([r["comms_per_site"] for r in rs]) for _, rs in points]
                axes[0].plot(mb, auc, **style)
                axes[1].plot(comms, auc, **style)
        for ax, xlabel in zip(axes, ("payload MB per site", "communications per site", "aligned rows N_o")):
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test AUC (median over seeds)")
            ax.grid(alpha=0.3)
        axes[0].set_xscale("symlog", linthresh=1)
        axes[1].set_xscale("symlog", linthresh=10)
        axes[2].legend(fontsize=8)
        fig.suptitle(f"{dataset}: each point is one overlap N_o ({', '.join(map(str, overlaps))})")
        fig.tight_layout()
        path = out / f"leaderboard_{dataset}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(path)
    return written


def difference(records: list[dict], baseline: list[dict]) -> str:
    """Per dataset, method and overlap: the median over seeds of (test AUC here - test AUC in `baseline`),
    seed by seed on the same splits, and on how many seeds it is positive. For one change (a setting)
    against the default run."""
    here, there = cells(records), cells(baseline)
    lines = []
    for dataset in sorted({r["dataset"] for r in records}):
        overlaps = sorted({r["overlap"] for r in records if r["dataset"] == dataset})
        lines += [
            f"### {dataset}: change in test AUC, median over seeds (seeds better)",
            "",
            "| method | " + " | ".join(f"N_o = {n}" for n in overlaps) + " |",
            "|---|" + "---|" * len(overlaps),
        ]
        for method in _methods(here, dataset):
            row = []
            for n in overlaps:
                old = {r["seed"]: r["metrics"]["test_auc"] for r in there.get((dataset, method, n), [])}
                deltas = [
                    r["metrics"]["test_auc"] - old[r["seed"]]
                    for r in here.get((dataset, method, n), [])
                    if r["seed"] in old
                ]
                row.append(f"{_median(deltas):+.3f} ({sum(d > 0 for d in deltas)}/{len(deltas)})" if deltas else "")
            lines.append(f"| {method} | " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


BOOTSTRAP_DRAWS = 10_000


def bootstrap_interval(deltas: list[float], draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float]:
    """Paired bootstrap 95 % interval of the mean of per-seed differences: seeds resampled with replacement
    (a fixed generator, so the report rebuilds to the same text)."""
    values = np.asarray(deltas, dtype=np.float64)
    means = values[np.random.default_rng(0).integers(0, len(values), size=(draws, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def verdict(low: float, high: float) -> str:
    """'beats' when the interval lies above 0, 'trails' below, else 'matches'."""
    return "beats" if low > 0 else "trails" if high < 0 else "matches"


def paired(records: list[dict], method: str, against: str) -> str:
    """Per dataset, settings and overlap: `method` - `against` in test AUC seed by seed on the same splits
    (the bench runs both on each), the median, the seeds where `method` is ahead, and a paired bootstrap
    95 % interval of the mean difference. For a comparison named before running."""
    lines = []
    for (dataset, label), group in groups(records).items():
        by = cells(group)
        overlaps = sorted({r["overlap"] for r in group})
        title = f"### {dataset}: {method} - {against}, test AUC per seed" + (f"; {label}" if label else "")
        lines += [
            title,
            "",
            "| N_o | seeds | difference per seed | median | ahead | mean, 95 % interval | reading |",
            "|---|---|---|---|---|---|---|",
        ]
        for n in overlaps:
            theirs = {r["seed"]: r["metrics"]["test_auc"] for r in by.get((dataset, against, n), [])}
            ours = {r["seed"]: r["metrics"]["test_auc"] for r in by.get((dataset, method, n), [])}
            seeds = sorted(set(ours) & set(theirs))
            if not seeds:
                continue
            deltas = [ours[s] - theirs[s] for s in seeds]
            low, high = bootstrap_interval(deltas)
            lines.append(
                f"| {n} | {', '.join(map(str, seeds))} | {', '.join(f'{d:+.3f}' for d in deltas)} | "
                f"{_median(deltas):+.3f} | {sum(d > 0 for d in deltas)}/{len(deltas)} | "
                f"{np.mean(deltas):+.3f} [{low:+.3f}, {high:+.3f}] | {method} {verdict(low, high)} |"
            )
        lines.append("")
    return "\n".join(lines)


def report_text(results_dir: Path, against: Path | None = None, pairs: list[tuple[str, str]] = ()) -> str:
    """`vflflare bench report`: the leaderboard tables of a folder's results.jsonl, with `against` (another
    such folder) the change in test AUC against it, and for each (method, other) of `pairs` their paired
    per-seed comparison."""
    records = read_jsonl(results_dir / RESULTS)
    if not records:
        raise ValueError(f"no results in {results_dir / RESULTS}")
    text = markdown(records)
    text += "".join("\n" + paired(records, method, other) for method, other in pairs)
    return text + ("\n" + difference(records, read_jsonl(against / RESULTS)) if against else "")
