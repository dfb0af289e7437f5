"""What NVFlare costs on top of the algorithm, on credit default (split and job seed 0).

(a) The one-shot job (N_o = 1000, package defaults) in the NVFlare simulator (2 sites, 2 threads) vs
    `run_inprocess` (the same phases in one process), alternated, `reps` times each. Reported: medians of
    - the simulator command's wall time vs the in-process call's (everything a user waits for),
    - the job's own wall time from its result record (controller start to result),
    - the same without the 'setup' phase (for the simulator: sites starting, loading and checking data).
(b) The same comparison on a longer one-shot job, `long_reps` times each: N_o = 2000 and ssl_epochs
    LONG_SSL_EPOCHS, so the in-process run takes about a minute. The simulator's start-up (processes,
    sites initialising before they take the setup task) is a fixed cost; this shows how it amortises.
(c) Split-NN step latency (N_o = 1000): a vanilla VFL job in the simulator, where each per-batch step is one
    cellnet request per site to its job cell, in parallel (FlareTransport.step); each round trip to both
    sites is timed by the ledger (result field 'step_latency'); also shown, the
    'split_training' phase wall time per step (which adds the label party's compute and the per-epoch
    validation and commit messages), next to the same numbers in-process.

    vflflare bench run overhead --set reps=3
    vflflare bench run overhead --set reps=0 --set split_reps=0 --set long_reps=3
    vflflare bench tables             # REPORT.md table 3 from the committed records (results/overhead.jsonl)
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from vflflare.bench.inprocess import limit_threads, run_vfl
from vflflare.bench.paths import COMMITTED, DEFAULT_SPLITS
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import SITES, prepare_split
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table
from vflflare.jobs import write_job
from vflflare.registry import make_config
from vflflare.simulation import simulate

RESULTS = COMMITTED / "overhead.jsonl"  # compact records: numbers and settings
OVERLAP, SEED = 1000, 0
LONG_OVERLAP, LONG_SSL_EPOCHS = 2000, 200  # ~1 min in-process on the benchmark machine (2 cores, 1 thread)
SHORT, LONG = "short", "long"


def _summary(mode: str, algorithm: str, result: dict, command_s: float, scenario: str = SHORT) -> dict:
    phases = result["phases"]
    split = sum(p["wall_s"] for p in phases if p["name"] == "split_training")
    steps = result.get("step_latency", {}).get("steps", 0)
    return {
        "mode": mode,
        "algorithm": algorithm,
        "scenario": scenario,
        "overlap": LONG_OVERLAP if scenario == LONG else OVERLAP,
        "ssl_epochs": result["config"].get("ssl_epochs"),  # one-shot's; vanilla VFL has none
        "command_s": round(command_s, 3),
        "job_s": result["wall_s"],
        "setup_s": sum(p["wall_s"] for p in phases if p["name"] == "setup"),
        "job_without_setup_s": round(sum(p["wall_s"] for p in phases if p["name"] != "setup"), 4),
        "phases": phases,
        "step_latency": result.get("step_latency", {}),
        "split_phase_ms_per_step": round(1000 * split / steps, 3) if steps else None,
        "metrics": result["metrics"],
        "communication": result["communication"]["total"],
    }


def _overrides(algorithm: str, scenario: str) -> dict:
    extra = {"ssl_epochs": LONG_SSL_EPOCHS} if scenario == LONG else {}
    return {"algorithm": algorithm, "seed": SEED, **extra}


def run_simulator(algorithm: str, root: Path, work: Path, rep: int, scenario: str = SHORT) -> dict:
    job = write_job(work / "jobs", f"{algorithm}_credit_{scenario}", _overrides(algorithm, scenario))
    workspace = work / f"ws_{algorithm}_{scenario}_{rep}"
    shutil.rmtree(workspace, ignore_errors=True)
    start = time.perf_counter()
    result = simulate(str(job), str(workspace), len(SITES), len(SITES), str(root), timeout=900)
    elapsed = time.perf_counter() - start
    if "error" in result:
        raise RuntimeError(f"simulator job failed: {result['error']}")
    shutil.rmtree(workspace, ignore_errors=True)  # workspaces hold logs and TensorBoard events only
    return _summary("simulator", algorithm, result, elapsed, scenario)


def run_in_process(algorithm: str, root: Path, scenario: str = SHORT) -> dict:
    start = time.perf_counter()
    result, _ = run_vfl(make_config(_overrides(algorithm, scenario)), root)
    return _summary("inprocess", algorithm, result, time.perf_counter() - start, scenario)


def _median(records: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in records)


MEASURES = [
    ("command_s", "whole command (what a user waits for)"),
    ("job_s", "job (result record `wall_s`)"),
    ("setup_s", "setup phase"),
    ("job_without_setup_s", "job without the setup phase"),
]


def _ratio(a: float, b: float) -> str:
    ratio = a / b
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x" if ratio >= 2 else f"{ratio:.2f}x"


def _oneshot(records: list[dict], mode: str, scenario: str) -> list[dict]:
    # records written before the long scenario existed have no "scenario": they are the short job
    return [r for r in records if r["algorithm"] == "oneshot" and r["mode"] == mode
            and r.get("scenario", SHORT) == scenario]  # fmt: skip


def _phase_medians(rows: list[dict]) -> dict[str, float]:
    """Median wall time of each phase over runs, in the phases' order."""
    names = [p["name"] for p in rows[0]["phases"]]
    return {n: statistics.median(p["wall_s"] for r in rows for p in r["phases"] if p["name"] == n) for n in names}


def _cells(a_rows: list[dict], b_rows: list[dict], key: str) -> list[str]:
    if not (a_rows and b_rows):
        return ["–", "–", "–"]
    a, b = _median(a_rows, key), _median(b_rows, key)
    return [f"{a:.1f} s", f"{b:.1f} s", _ratio(a, b)]


def tables(records: list[dict]) -> str:
    """REPORT.md §4's tables in its order: the short one-shot job (simulator vs in-process, medians), short
    next to long, the split-NN step latency; with the notes the report quotes (metrics, phase medians,
    per-pair ratios)."""
    out = []
    sim, inproc = _oneshot(records, "simulator", SHORT), _oneshot(records, "inprocess", SHORT)
    if sim and inproc:
        out += [
            f"One-shot VFL, credit default N_o={OVERLAP}, seed {SEED}: median of {len(sim)} simulator and "
            f"{len(inproc)} in-process runs\n",
            "| measure | simulator | in-process | ratio |",
            "|---|---|---|---|",
        ]
        out += [f"| {title} | " + " | ".join(_cells(sim, inproc, key)) + " |" for key, title in MEASURES]
        same = all(r["metrics"] == inproc[0]["metrics"] for r in sim + inproc)
        out.append(f"\nSame metrics in every run: {same} ({inproc[0]['metrics']})")
        for mode, rows in (("simulator", sim), ("in-process", inproc)):
            per_phase = _phase_medians(rows)
            out.append(f"- {mode} phase medians (s): " + ", ".join(f"{n} {v:.2f}" for n, v in per_phase.items()))
    long_sim, long_inproc = _oneshot(records, "simulator", LONG), _oneshot(records, "inprocess", LONG)
    if long_sim and long_inproc:
        epochs = long_inproc[0]["ssl_epochs"]
        out += [
            f"\nShort vs long one-shot job: medians. Short: N_o={OVERLAP}, ssl_epochs 10, {len(sim)} + "
            f"{len(inproc)} runs; long: N_o={LONG_OVERLAP}, ssl_epochs {epochs}, {len(long_sim)} + "
            f"{len(long_inproc)} runs\n",
            "| measure | short: simulator | short: in-process | short: ratio | long: simulator | long: in-process "
            "| long: ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, title in MEASURES:
            cells = _cells(sim, inproc, key) + _cells(long_sim, long_inproc, key)
            out.append(f"| {title} | " + " | ".join(cells) + " |")
        # runs alternate simulator / in-process, so the i-th of each ran back to back under similar load
        pairs = list(zip(long_sim, long_inproc))
        out.append(
            "\nLong job, per repetition (simulator / in-process, back-to-back pairs): job "
            + ", ".join(f"{a['job_s'] / b['job_s']:.2f}x" for a, b in pairs)
            + "; whole command "
            + ", ".join(f"{a['command_s'] / b['command_s']:.2f}x" for a, b in pairs)
        )
        out.append(
            "Long job, command - job (s): simulator "
            + ", ".join(f"{r['command_s'] - r['job_s']:.1f}" for r in long_sim)
            + "; setup (s): simulator "
            + ", ".join(f"{r['setup_s']:.1f}" for r in long_sim)
            + "; in-process wall (s): "
            + ", ".join(f"{r['command_s']:.1f}" for r in long_inproc)
        )
        same = all(r["metrics"] == long_inproc[0]["metrics"] for r in long_sim + long_inproc)
        out.append(f"Same metrics in every long run: {same} ({long_inproc[0]['metrics']})")
        for mode, rows in (("simulator", long_sim), ("in-process", long_inproc)):
            per_phase = _phase_medians(rows)
            out.append(f"- long, {mode} phase medians (s): " + ", ".join(f"{n} {v:.2f}" for n, v in per_phase.items()))
    split = [r for r in records if r["algorithm"] == "vanilla"]
    if split:
        out += [
            f"\nSplit-NN steps (vanilla VFL, batch 32, {len(SITES)} sites, N_o={OVERLAP}, seed {SEED}): medians "
            f"over runs\n",
            "| mode | runs | timed steps | median step | p90 step | split_training phase / step |",
            "|---|---|---|---|---|---|",
        ]
        for mode, title in (
            ("simulator", "simulator (cellnet request per site)"),
            ("inprocess", "in-process (compute only)"),
        ):
            rows = [r for r in split if r["mode"] == mode]
            if rows:
                median = statistics.median(r["step_latency"]["median_ms"] for r in rows)
                p90 = statistics.median(r["step_latency"]["p90_ms"] for r in rows)
                per_step = statistics.median(r["split_phase_ms_per_step"] for r in rows)
                steps = rows[0]["step_latency"]["steps"]
                out.append(f"| {title} | {len(rows)} | {steps} | {median:.1f} ms | {p90:.1f} ms | {per_step:.1f} ms |")
    return "\n".join(out)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """The runs of (a)-(c), the two modes alternated; each appended to `out` as it ends."""
    settings = spec.settings
    limit_threads()
    roots = {SHORT: prepare_split(data_dir, OVERLAP, SEED, DEFAULT_SPLITS)}
    if settings["long_reps"]:
        roots[LONG] = prepare_split(data_dir, LONG_OVERLAP, SEED, DEFAULT_SPLITS)
    env = environment_record()
    work = Path(settings["work"])
    # alternate the two modes so drifting machine load hits both alike
    both = ("simulator", "inprocess")
    runs = [(mode, "oneshot", rep, SHORT) for rep in range(settings["reps"]) for mode in both]
    runs += [(mode, "vanilla", rep, SHORT) for rep in range(settings["split_reps"]) for mode in both]
    runs += [(mode, "oneshot", rep, LONG) for rep in range(settings["long_reps"]) for mode in both]
    for mode, algorithm, rep, scenario in runs:
        if mode == "simulator":
            record = run_simulator(algorithm, roots[scenario], work, rep, scenario)
        else:
            record = run_in_process(algorithm, roots[scenario], scenario)
        append_jsonl(out, {**record, "rep": rep, "config": _overrides(algorithm, scenario), "env": env})
        print(
            f"{mode:10s} {algorithm:8s} {scenario} rep {rep}: command {record['command_s']:.1f} s, "
            f"job {record['job_s']:.1f} s,"
            f" without setup {record['job_without_setup_s']:.1f} s, step {record['step_latency']}",
            flush=True,
        )


@table("overhead")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="overhead",
        about="what NVFlare costs on top of the algorithm: simulator against in process (REPORT.md table 3)",
        runner=run,
        datasets=("credit_default",),
        methods=("oneshot", "vanilla"),
        seeds=(SEED,),
        settings={
            "reps": 3,  # repetitions of the one-shot comparison
            "split_reps": 1,  # vanilla VFL simulator runs for the step latency
            "long_reps": 0,  # repetitions of the long one-shot job (N_o 2000, ssl_epochs 200)
            "work": "/tmp/vflflare-bench/overhead",  # job folders and simulator workspaces
        },
        records="overhead.jsonl",
    )
)
