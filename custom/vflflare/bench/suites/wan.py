"""Every algorithm as a real POC (NVFlare server, site and admin processes) with the sites' traffic through an
emulated wide-area link (poc/wan_link.py, via poc/run.sh --link-rtt-ms/--link-mbit), on credit default
(2 sites, N_o 1000, split and job seed 0, package defaults as the parity suite runs them).

Links: round trips of 0, 20 and 100 ms at 1 Gbit/s, and 100 and 10 Mbit/s at 20 ms, the bandwidth each site's
(shared by its connections), no jitter and no loss unless the settings ask (records keep them when set; the
report's tables and plot use the runs without). Each record keeps
the whole command's wall time (POC start to stop), the job's own (controller start to result), its
phases, the coordinator's round trips and the ledger's counts, the bytes the link carried, the step
latency and the metrics. The floor of a job on a link is modelled from the job on the fastest link:

    floor = job wall at 0 ms / 1 Gbit  +  round trips x RTT  +  link bytes per site / bandwidth

(round trips: the ledger's exchanges and steps, each one to all sites in parallel; link bytes: what the
relay carried, both directions, shared evenly by the sites).

    vflflare bench run wan --committed            # every method x link; runs already recorded are skipped
    vflflare bench run wan --methods vanilla --set links='["0/1000", "100/1000"]'
    vflflare bench run wan --set links='["20/100"]' --set jitter_ms=2 --set loss=0.001   # with jitter and loss
    vflflare bench tables                         # the report's tables from benchmarks/results/wan.jsonl

A run also draws the wall-time plot (benchmarks/wan_wall_time.png for the committed records, else beside them).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from vflflare.bench.paths import BENCHMARKS, COMMITTED, DEFAULT_SPLITS
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.suite import Suite, suite
from vflflare.bench.suites.parity import METHODS as PARITY_METHODS
from vflflare.bench.suites.parity import SPLIT_ARGS, sets, split, vflflare
from vflflare.bench.tables import table
from vflflare.data.split import parse_sites
from vflflare.data.split.dataset import split_silo_dataset, synthetic_options
from vflflare.poc.processes import free_port
from vflflare.poc.runner import POC_RUN

RESULTS = COMMITTED / "wan.jsonl"
# issue 29's run, over the relay that shaped each connection (a site with 2 connections could get twice its link)
PER_CONNECTION = COMMITTED / "wan_per_connection.jsonl"
SEED = 0
METHODS = {**PARITY_METHODS, "cfl": ("cfl", {})}
LINKS = ["0/1000", "20/1000", "100/1000", "20/100", "20/10"]  # RTT ms / Mbit/s
BASE = "0/1000"
# jitter_ms: each chunk's one-way delay varies by this much (jitter: "uniform" +-, or "normal" sd); loss: per TCP
# segment, each loss delaying its chunk by loss_penalty_ms (None: one RTT). Off: the report's links have neither.
IMPAIRMENT = {"jitter_ms": 0.0, "jitter": "uniform", "loss": 0.0, "loss_penalty_ms": None}


def parse_link(link: str) -> tuple[float, float]:
    rtt, mbit = link.split("/")
    return float(rtt), float(mbit)


def data_root(method: str, data_dir: Path) -> Path:
    """The method's split: CFL's a silo space of the same table (each site its own rows and labels)."""
    if method != "cfl":
        return split(SEED, SPLIT_ARGS.get(method, ()), data_dir)
    out = DEFAULT_SPLITS / f"credit_default_silo_space_s{SEED}"
    if not (out / "manifest.json").exists():
        split_silo_dataset(
            "credit_default",
            str(data_dir),
            parse_sites("2"),
            SEED,
            str(out),
            synthetic=synthetic_options("credit_default", SEED, None, None, None),
        )
    return out


def impairment(settings) -> dict:
    """The suite's jitter and loss settings (all off by default: the committed records have neither)."""
    return {key: settings.get(key, default) for key, default in IMPAIRMENT.items()}


def impairment_args(impaired: dict) -> list[str]:
    args = ["--link-jitter-ms", str(impaired["jitter_ms"]), "--link-jitter", impaired["jitter"]]
    args += ["--link-loss", str(impaired["loss"])]
    if impaired["loss_penalty_ms"] is not None:
        args += ["--link-loss-penalty-ms", str(impaired["loss_penalty_ms"])]
    return args


def impaired_key(record: dict) -> tuple:
    """A record's jitter and loss (a record from before they existed: none)."""
    return tuple(record.get(key, default) for key, default in IMPAIRMENT.items())


def run_poc(job: Path, root: Path, workspace: Path, link: str, timeout: int, impaired: dict | None = None) -> dict:
    """poc/run.sh on job folder `job` and data root `root`, its sites behind the relay on `link`: the job's result
    record, plus `command_s` (POC start to stop) and `link_bytes` (what the relay carried)."""
    rtt, mbit = parse_link(link)
    start = time.monotonic()
    proc = subprocess.run(
        [
            "bash",
            str(POC_RUN),
            str(job),
            "--data-root",
            str(root),
            "--workspace",
            str(workspace),
            "--port",
            str(free_port()),
            "--timeout",
            str(timeout),
            "--start-timeout",
            "180",
            "--link-rtt-ms",
            str(rtt),
            "--link-mbit",
            str(mbit),
            *impairment_args(impaired or dict(IMPAIRMENT)),
        ],
        capture_output=True,
        text=True,
    )
    command_s = time.monotonic() - start
    results = next((workspace / "results").rglob("vflflare_results.json"), None)
    if proc.returncode != 0 or results is None:
        raise RuntimeError(
            f"{job.name} over {link}: poc/run.sh exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    record = json.loads(results.read_text())
    link_bytes = json.loads((workspace / "results" / "link.json").read_text())
    return {**record, "command_s": round(command_s, 2), "link_bytes": link_bytes}


def run_one(method: str, link: str, work: Path, timeout: int, data_dir: Path, impaired: dict | None = None) -> dict:
    algorithm, overrides = METHODS[method]
    impaired = impaired or dict(IMPAIRMENT)
    root = data_root(method, data_dir)
    name = method.replace("+", "_")
    out = work / f"{name}_{link.replace('/', '_')}"
    vflflare(
        "jobs", "--out", str(out / "jobs"), "--name", name, "--algorithm", algorithm, *sets({**overrides, "seed": SEED})
    )
    rtt, mbit = parse_link(link)
    record = run_poc(out / "jobs" / name, root, out / "poc", link, timeout, impaired)
    comm = record["communication"]
    return {
        "method": method,
        "link": link,
        "rtt_ms": rtt,
        "mbit": mbit,
        **({} if impaired == IMPAIRMENT else impaired),  # jitter and loss, when the link had them
        "seed": SEED,
        "metrics": record["metrics"],
        "command_s": record["command_s"],
        "job_s": record["wall_s"],
        "phases": phase_walls(record),
        "rounds": comm["rounds"],
        "per_site": comm["per_site"],
        "step_latency": record.get("step_latency", {}),
        "link_bytes": record["link_bytes"],
        "env": environment_record(),
    }


def phase_walls(record: dict) -> dict[str, float]:
    return {p["name"]: p["wall_s"] for p in record["phases"]}


def floor_s(record: dict, base: dict) -> float:
    rounds = sum(record["rounds"].values())
    per_site = (record["link_bytes"]["up_bytes"] + record["link_bytes"]["down_bytes"]) / len(record["per_site"])
    return base["job_s"] + rounds * record["rtt_ms"] / 1000 + per_site * 8 / (record["mbit"] * 1e6)


def machine(record: dict) -> str | None:
    """The machine a run was on, as far as its record tells: its VM's kernel build."""
    return record.get("env", {}).get("platform")


def base_for(record: dict, records: list[dict]) -> dict | None:
    """The base-link run that `record` is set against: the same method's on the same machine where the suite ran
    on several (a slower machine would otherwise read as a slower link), else its first."""
    bases = [r for r in records if r["method"] == record["method"] and r["link"] == BASE]
    return next((r for r in bases if machine(r) == machine(record)), bases[0] if bases else None)


def tables(records: list[dict]) -> str:
    """Per method: the job's wall time on each link, next to its modelled floor, and what it sends (links
    without jitter or loss)."""
    records = [r for r in records if impaired_key(r) == tuple(IMPAIRMENT.values())]
    links = [link for link in LINKS if any(r["link"] == link for r in records)]
    methods = [m for m in METHODS if any(r["method"] == m for r in records)]
    cell = {(r["method"], r["link"]): r for r in records}
    head = " | ".join(f"{link.split('/')[0]} ms, {link.split('/')[1]} Mbit/s" for link in links)
    out = [
        "Job wall time in s (floor model in brackets); credit default N_o 1000, seed 0, 2 sites, real POC\n",
        f"| method | round trips | MB per site | {head} |",
        "|---|---|---|" + "---|" * len(links),
    ]
    for method in methods:
        cells = []
        for link in links:
            r = cell.get((method, link))
            if link == BASE:
                runs = [b for b in records if b["method"] == method and b["link"] == BASE]
                cells.append(" / ".join(f"{b['job_s']:.1f}" for b in runs) or "-")
                continue
            base = r and base_for(r, records)
            floor = f" ({floor_s(r, base):.1f})" if base else ""
            cells.append("-" if r is None else f"{r['job_s']:.1f}{floor}")
        any_run = next(cell[(method, link)] for link in links if (method, link) in cell)
        wire = statistics.mean(row["wire_bytes"] for row in any_run["per_site"].values()) / 1e6
        out.append(f"| {method} | {sum(any_run['rounds'].values())} | {wire:.1f} | " + " | ".join(cells) + " |")
    out += [
        "",
        "Whole command (POC start to stop) in s, and the split-NN step's median latency in ms where it has steps "
        "(two runs on the base link: two machines, first / second)\n",
        f"| method | {head} |",
        "|---|" + "---|" * len(links),
    ]
    for method in methods:
        cells = []
        for link in links:
            runs = [r for r in records if r["method"] == method and r["link"] == link]
            steps = [r["step_latency"].get("median_ms") for r in runs]
            cells.append(
                " / ".join(f"{r['command_s']:.0f}" for r in runs)
                + (f", {' / '.join(f'{step:.0f}' for step in steps)} ms" if all(steps) and runs else "")
                or "-"
            )
        out.append(f"| {method} | " + " | ".join(cells) + " |")
    slow = [link for link in links if link != BASE]
    if not slow:
        return "\n".join(out)
    out += [
        "",
        f"Time the link added: job wall minus the job's wall on the {BASE.replace('/', ' ms, ')} Mbit/s link, "
        "in s, and per round trip in ms\n",
        "| method | " + " | ".join(f"{link.split('/')[0]} ms, {link.split('/')[1]} Mbit/s" for link in slow) + " |",
        "|---|" + "---|" * len(slow),
    ]
    for method in methods:
        cells = []
        for link in slow:
            r = cell.get((method, link))
            base = r and base_for(r, records)
            if r is None or base is None:
                cells.append("-")
                continue
            added = r["job_s"] - base["job_s"]
            cells.append(f"{added:.1f} ({1000 * added / sum(r['rounds'].values()):.0f} ms)")
        out.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in METHODS:
        links = [r for r in records if r["method"] == method and r["mbit"] == 1000 and r["link"] != BASE]
        base = base_for(links[0], records) if links else None
        points = sorted((r["rtt_ms"], r["job_s"]) for r in [*links, *([base] if base else [])])
        if points:
            ax.plot(*zip(*points), marker="o", label=method)
    ax.set_xlabel("round-trip time (ms), 1 Gbit/s")
    ax.set_ylabel("job wall time (s)")
    ax.set_yscale("log")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (link, method) not yet in `out`, appended as each ends; then the wall-time plot."""
    impaired = impairment(spec.settings)
    done = {(r["method"], r["link"]) for r in read_jsonl(out) if impaired_key(r) == tuple(impaired.values())}
    with tempfile.TemporaryDirectory(prefix="vflflare-wan-") as work:
        for link in spec.settings["links"]:
            for method in spec.methods:
                if (method, link) in done:
                    continue
                record = run_one(method, link, Path(work), spec.settings["timeout"], data_dir, impaired)
                append_jsonl(out, record)
                print(
                    f"{method} over {link}: job {record['job_s']:.1f} s, command {record['command_s']:.0f} s, "
                    f"{record['metrics']}",
                    flush=True,
                )
    same = [r for r in read_jsonl(out) if impaired_key(r) == tuple(impaired.values())]
    report_plot = out.resolve() == RESULTS.resolve() and impaired == IMPAIRMENT
    plot(same, BENCHMARKS / "wan_wall_time.png" if report_plot else out.with_name("wan_wall_time.png"))


def moved(before: list[dict], after: list[dict]) -> str:
    """Job wall per method on each link `after` has, `before`'s run → `after`'s; on a link other than the base,
    also what the link added (job wall minus the base run of its own machine, `base_for`), which the code and
    machine between the two runs move less. `after`'s base column is its first machine's."""
    plain = [r for r in after if impaired_key(r) == tuple(IMPAIRMENT.values())]
    links = [link for link in LINKS if any(r["link"] == link for r in plain)]
    old = {(r["method"], r["link"]): r["job_s"] for r in before if impaired_key(r) == tuple(IMPAIRMENT.values())}
    new: dict[tuple[str, str], float] = {}
    for r in plain:
        if r["link"] != BASE or (r["method"], BASE) not in new:
            new[(r["method"], r["link"])] = r["job_s"]
    bases = {(r["method"], r["link"]): base["job_s"] for r in plain if (base := base_for(r, plain))}
    out = [
        "| method | " + " | ".join(f"{link.split('/')[0]} ms, {link.split('/')[1]} Mbit/s" for link in links) + " |",
        "|---|" + "---|" * len(links),
    ]
    for method in (m for m in METHODS if any(k[0] == m for k in new)):
        cells = []
        for link in links:
            a, b = old.get((method, link)), new.get((method, link))
            if a is None or b is None:
                cells.append("-")
                continue
            cell = f"{a:.1f} → {b:.1f} ({b - a:+.1f})"
            a0, b0 = old.get((method, BASE)), bases.get((method, link))
            if link != BASE and a0 is not None and b0 is not None:
                cell += f"; link {a - a0:.1f} → {b - b0:.1f}"
            cells.append(cell)
        out.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(out) if links else "| pending |\n|---|"


@table("wan")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


@table("wan_moved")
def committed_moved() -> str:
    return moved(read_jsonl(PER_CONNECTION), read_jsonl(RESULTS))


suite(
    Suite(
        name="wan",
        about="every algorithm as a real POC across emulated wide-area links (WAN_REPORT.md)",
        runner=run,
        datasets=("credit_default",),
        methods=tuple(METHODS),
        seeds=(SEED,),
        # links: RTT_MS/MBIT each (MBIT per site, each way); timeout: s one job may take; jitter and loss: IMPAIRMENT
        settings={"links": tuple(LINKS), "timeout": 3600, **IMPAIRMENT},
        records="wan.jsonl",
    )
)
