"""Split NN at SecretFlow's published shape (issue 41, item 3): 2 parties, each N rows x 1500 features, every
training row aligned and labeled, a real POC (NVFlare server, site and admin processes) with each site behind
the relay at 100 Mbit/s and 50 ms (poc/wan_link.py); then every training row scored.

SecretFlow's numbers (2 x 800k x 1500, 100 Mbit/s, 50 ms): split NN 6,844 s, SecureBoost 4,176 s, split-NN
inference 5 s. Data: `synthetic_linear` (data/split/streamed.py), N training rows per site (and N/4 test rows),
so its test AUC has a known ceiling, the true logit's (`oracle_auc`); a central model cannot beat it, so a
run within 0.02 of it is within 0.02 of central training. Each N is one record per method:

- `vanilla`: split NN with large batches, several batches per round trip and half-precision on the wire
  (VANILLA), at most `split_epochs` passes with the package's early stopping on the validation rows;
- `oneshot`: one-shot VFL at the same batch size (ONESHOT);
- `score`: jobs/vertical_inference with the model `vanilla` just saved, on every training row of each site
  (each site's score.parquet is its train.parquet, the server's lists their IDs); its `job_s` is net of
  NVFlare's start-up (controller start to result), as SecretFlow's 5 s is a model's inference alone.

The settings were chosen before any run, from the package's defaults and the link (not tuned on any split).

    vflflare bench run splitnn_scale --committed                       # the committed sizes
    vflflare bench run splitnn_scale --set rows='[800000]' --out /tmp/s800k.jsonl
    vflflare bench tables
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vflflare.bench.paths import COMMITTED, DEFAULT_SPLITS
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.suite import Suite, suite
from vflflare.bench.suites.parity import sets, vflflare
from vflflare.bench.suites.wan import phase_walls, run_poc
from vflflare.bench.tables import table
from vflflare.config import SERVER
from vflflare.data.split import parse_sites
from vflflare.data.split.streamed import write_streamed_synthetic

RESULTS = COMMITTED / "splitnn_scale.jsonl"
SEED = 0
LINK = "50/100"  # RTT ms / Mbit/s, each site's
FEATURES = 3000  # 1500 per site
SECRETFLOW_S = {"split NN": 6844.0, "SecureBoost": 4176.0, "inference": 5.0}
SECRETFLOW_ROWS = 800_000
BIG_BATCH = {"batch_size": 1024, "seed": SEED}
VANILLA = {**BIG_BATCH, "batches_per_step": 4, "wire_dtype": "float16", "split_epochs": 20, "split_patience": 5}
ONESHOT = {**BIG_BATCH, "wire_dtype": "float16"}
METHODS = {"vanilla": ("vanilla", VANILLA), "oneshot": ("oneshot", ONESHOT)}


def data_root(rows: int) -> Path:
    """`rows` aligned training rows per site (and rows / 4 test rows), cut once and reused."""
    out = DEFAULT_SPLITS / f"synthetic_linear_{rows}x{FEATURES}_s{SEED}"
    if not (out / "manifest.json").exists():
        write_streamed_synthetic(out, parse_sites("2"), rows + rows // 4, FEATURES, rows, SEED, test_fraction=0.2)
        for site in parse_sites("2"):
            (out / site / "score.parquet").symlink_to("train.parquet")
    own = out / SERVER / "score.parquet"  # the label party asks for every training row's score, by its IDs
    if not own.exists():
        import pyarrow.parquet as pq  # noqa: PLC0415 - the suite's data only

        labels = pq.read_table(out / SERVER / "train_labels.parquet")
        pq.write_table(labels.select([labels.column_names[0]]), own)
    return out


def _record(method: str, rows: int, root: Path, result: dict, overrides: dict) -> dict:
    manifest = json.loads((root / "manifest.json").read_text())
    return {
        "method": method,
        "rows": rows,
        "features": FEATURES,
        "link": LINK,
        "settings": overrides,
        "oracle_auc": manifest["signal"]["oracle_test_auc"],
        "metrics": result["metrics"],
        "job_s": result["wall_s"],
        "command_s": result["command_s"],
        "phases": phase_walls(result),
        "link_bytes": result["link_bytes"],
        "rounds": result["communication"]["rounds"],
        "env": environment_record(),
    }


def run_size(rows: int, methods: list[str], work: Path, timeout: int, score: bool = True) -> Iterator[dict]:
    """Each method's record as its job ends (a later job that fails keeps the earlier ones)."""
    root = data_root(rows)
    for method in methods:
        algorithm, overrides = METHODS[method]
        jobs = work / f"{method}_{rows}"
        vflflare("jobs", "--out", str(jobs), "--name", method, "--algorithm", algorithm, *sets(overrides))
        result = run_poc(jobs / method, root, work / f"poc_{method}_{rows}", LINK, timeout)
        yield _record(method, rows, root, result, overrides)
        if method == "vanilla" and score:  # the model it saved scores every training row
            model = {"model_job": result["model_id"]}
            scoring = work / f"score_{rows}"
            vflflare(
                "jobs", "--out", str(scoring), "--name", "score", "--algorithm", "vertical_inference", *sets(model)
            )
            scored = run_poc(scoring / "score", root, work / f"poc_score_{rows}", LINK, timeout)
            yield {**_record("score", rows, root, scored, model), "scored": rows}


def run(spec: Suite, out: Path, data_dir: Path | None) -> None:
    done = {(r["method"], r["rows"]) for r in read_jsonl(out)}
    with tempfile.TemporaryDirectory(prefix="vflflare-splitnn-scale-") as work:
        for rows in spec.settings["rows"]:
            methods = [m for m in spec.methods if (m, rows) not in done]
            settings = (spec.settings["timeout"], spec.settings["score"])
            for record in run_size(rows, methods, Path(work), *settings) if methods else ():
                append_jsonl(out, record)
                print(f"{record['method']} at {rows} rows: job {record['job_s']:.1f} s {record['metrics']}", flush=True)


def linear_fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Seconds = fixed + per_row * rows, least squares over the measured sizes."""
    rows, seconds = np.array(points, dtype=float).T
    per_row, fixed = np.polyfit(rows, seconds, 1)
    return float(fixed), float(per_row)


def per_size(records: list[dict], which: int) -> list[dict]:
    """One record per (method, rows): the first measured (which=0) or the latest (which=-1)."""
    runs: dict[tuple[str, int], list[dict]] = {}
    for record in records:
        runs.setdefault((record["method"], record["rows"]), []).append(record)
    return [found[which] for found in runs.values()]


def remeasured(records: list[dict]) -> str:
    """The sizes measured again with later code: first against latest, side by side."""
    out = [
        "| N per site | method | code before → after | test AUC | job s | setup s | training (scoring) s |",
        "|---|---|---|---|---|---|---|",
    ]
    for first, latest in zip(per_size(records, 0), per_size(records, -1)):
        if first is latest:
            continue
        code = f"{first['env']['commit'][:7]} → {latest['env']['commit'][:7]}"
        cells = " | ".join(f"{a} → {b}" for a, b in zip(_cells(first), _cells(latest)))
        out.append(f"| {latest['rows']:,} | {latest['method']} | {code} | {cells} |")
    return "\n".join(out) if len(out) > 2 else "| pending |\n|---|"


def _cells(r: dict) -> tuple[str, str, str, str]:
    """Test AUC, job s, setup s (scoring: reading and aligning) and training s (scoring: the model's pass)."""
    auc = r["metrics"].get("test_auc")
    setup = r["phases"].get("setup", r["phases"].get("score_alignment", 0.0))
    training = sum(s for name, s in r["phases"].items() if name not in ("setup", "score_alignment", "evaluation"))
    return "-" if auc is None else f"{auc:.4f}", f"{r['job_s']:.1f}", f"{setup:.1f}", f"{training:.1f}"


def tables(records: list[dict]) -> str:
    """The first measurement of each size and method, and the linear fit over them."""
    records = per_size(records, 0)
    if not records:
        return "| pending |\n|---|"
    out = [
        f"2 sites x N rows x {FEATURES // 2} features, POC, each site behind {LINK.split('/')[1]} Mbit/s and "
        f"{LINK.split('/')[0]} ms; job wall (controller start to result) in s\n",
        "| N per site | method | test AUC | ceiling (true logit) | job s | setup s | training (scoring) s "
        "| MB per site | s per 1k rows |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        records, key=lambda r: (r["rows"], list(METHODS).index(r["method"]) if r["method"] in METHODS else 9)
    ):
        auc, job, setup, training = _cells(r)
        mb = (r["link_bytes"]["up_bytes"] + r["link_bytes"]["down_bytes"]) / 2e6
        out.append(
            f"| {r['rows']:,} | {r['method']} | {auc} | {r['oracle_auc']:.4f} | {job} | {setup} | {training} | "
            f"{mb:.0f} | {1000 * r['job_s'] / r['rows']:.3f} |"
        )
    out += ["", f"Projected to SecretFlow's {SECRETFLOW_ROWS:,} rows (least squares over the measured sizes)\n"]
    out += [
        "| method | sizes | fixed s | ms per row | at 800k, s (measured, else the fit) | SecretFlow, s |",
        "|---|---|---|---|---|---|",
    ]
    theirs = {"vanilla": "split NN", "oneshot": "split NN", "score": "inference"}
    for method in ("vanilla", "oneshot", "score"):
        points = sorted((r["rows"], r["job_s"]) for r in records if r["method"] == method)
        if len(points) < 2:
            continue
        fixed, per_row = linear_fit(points)
        measured = [seconds for n, seconds in points if n == SECRETFLOW_ROWS]
        at = f"{measured[-1]:,.0f} (measured)" if measured else f"{fixed + per_row * SECRETFLOW_ROWS:,.0f}"
        name = theirs[method]
        other = "" if name == "inference" else f" (SecureBoost {SECRETFLOW_S['SecureBoost']:,.0f})"
        out.append(
            f"| {method} | {', '.join(f'{n:,}' for n, _ in points)} | {fixed:.1f} | {1000 * per_row:.4f} | "
            f"{at} | {SECRETFLOW_S[name]:,.0f}{other} |"
        )
    return "\n".join(out)


@table("splitnn_scale")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


@table("splitnn_scale_remeasured")
def committed_remeasured() -> str:
    return remeasured(read_jsonl(RESULTS))


suite(
    Suite(
        name="splitnn_scale",
        about="split NN and one-shot at SecretFlow's 2 x 800k x 1500 shape (or fractions), POC behind a 100 Mbit/s "
        "50 ms link per site, then scoring (SCALE_REPORT.md)",
        runner=run,
        datasets=(),
        methods=tuple(METHODS),
        seeds=(SEED,),
        # rows: training rows per site, each a record per method; timeout: s one POC job may take; score: also
        # score every training row with vanilla's model (false: train only)
        settings={"rows": (25_000, 50_000, 100_000, 200_000, 400_000), "timeout": 7200, "score": True},
        records="splitnn_scale.jsonl",
    )
)
