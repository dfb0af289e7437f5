"""REFACTOR_PARITY.md: before/after check of a refactor. Every algorithm on credit default (2 sites, N_o 1000),
seeds 0-2, in process and in the NVFlare simulator. The runs talk to vflflare only through its command line
(`split`, `inprocess`, `jobs`, `simulate`) in child processes, so one suite runs the code before and after a
change: the `code` setting is the PYTHONPATH those processes get (default: this process's).

    git worktree add /tmp/vfl_before <old commit>
    vflflare bench run parity --set code=/tmp/vfl_before/custom --out /tmp/parity/before.jsonl
    vflflare bench run parity --set code=custom --out /tmp/parity/after.jsonl
    vflflare bench parity /tmp/parity/before.jsonl /tmp/parity/after.jsonl     # exit 1 if a number moved

`--set job='{"numeric_transform": "ple"}'` gives every run those JobConfig settings too (a change behind a
setting that the default runs never reach).

Each record keeps the metrics and, per site, uploads, downloads, payload bytes and wire bytes. The
comparison has one row per (method, seed, mode) and flags any number that moved; the committed pairs are
benchmarks/results/ISSUE_parity/{before,after}.jsonl.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from vflflare.bench.paths import COMMITTED, DEFAULT_SPLITS, resolve_data_dir
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import register

# method -> (algorithm, --set overrides); fedbcd with the paper's Q = 5
METHODS: dict[str, tuple[str, dict]] = {
    "vanilla": ("vanilla", {}),
    "fedbcd": ("fedbcd", {"local_steps": 5}),
    "oneshot": ("oneshot", {}),
    "fewshot": ("fewshot", {}),
    "fewshot+finetune": ("fewshot", {"finetune_epochs": 20}),
    "ssvfl_i": ("ssvfl_i", {}),
    "ssvfl_c": ("ssvfl_c", {}),
    "fedhssl": ("fedhssl", {}),
    "vflhlp": ("vflhlp", {"label_owner": "site-1"}),
}
# run only when named (--methods): a silo space (CFL on credit default's columns) and an image split (one-shot on
# MNIST halves, 800 training and 200 test images, N_o 200)
EXTRA_METHODS: dict[str, tuple[str, dict]] = {"cfl": ("cfl", {}), "oneshot_mnist": ("oneshot", {})}
# methods whose split differs from the default one (labels at the server): extra `vflflare split` arguments
SPLIT_ARGS: dict[str, tuple[str, ...]] = {
    "vflhlp": ("--label-owner", "site-1", "--active-site-labels"),
    "cfl": ("--silo-space",),
    "oneshot_mnist": ("--dataset", "mnist", "--overlap", "200", "--train-rows", "800", "--test-rows", "200"),
}
MODES = ("inprocess", "simulator")
# the code under test's command line, whether its vflflare.cli is a module or a package
CLI = ("-c", "import sys; from vflflare.cli import main; sys.exit(main())")


def vflflare(*args: str, env: dict | None = None) -> None:
    subprocess.run([sys.executable, *CLI, *args], check=True, env=env, stdout=subprocess.DEVNULL)


def split(seed: int, extra: tuple[str, ...] = (), data_dir: Path | None = None, env: dict | None = None) -> Path:
    """Credit default (or `extra`'s dataset) cut by `vflflare split` once per argument set; the data folder is
    `data_dir`, else $VFLFLARE_DATA_DIR."""
    data_dir = resolve_data_dir(data_dir)
    out = DEFAULT_SPLITS / ("_".join([f"credit_default_n1000_s{seed}", *(a.strip("-") for a in extra)]))
    if not (out / "manifest.json").exists():
        dataset = () if "--dataset" in extra else ("--dataset", "credit_default")
        overlap = () if "--overlap" in extra or "--silo-space" in extra else ("--overlap", "1000")
        args = ("--data-dir", str(data_dir), "--sites", "2", "--seed", str(seed), "--out", str(out))
        vflflare("split", *dataset, *overlap, *args, *extra, env=env)
    return out


def sets(overrides: dict) -> list[str]:
    return [arg for key, value in overrides.items() for arg in ("--set", f"{key}={json.dumps(value)}")]


def run_one(
    method: str, seed: int, mode: str, work: Path, data_dir: Path, env: dict | None = None, job: dict | None = None
) -> dict:
    algorithm, overrides = {**METHODS, **EXTRA_METHODS}[method]
    root = split(seed, SPLIT_ARGS.get(method, ()), data_dir, env)
    overrides = {**(job or {}), **overrides, "seed": seed}
    out = work / f"{method}_{seed}_{mode}"
    out.mkdir(parents=True)
    if mode == "inprocess":
        result = out / "result.json"
        vflflare(
            "inprocess", "--algorithm", algorithm, "--data-root", str(root), "--json", str(result),
            *sets(overrides), env=env,
        )  # fmt: skip
    else:
        name = method.replace("+", "_")
        vflflare(
            "jobs", "--out", str(out / "jobs"), "--name", name, "--algorithm", algorithm, *sets(overrides), env=env
        )
        vflflare(
            "simulate", str(out / "jobs" / name), "-w", str(out / "ws"), "-n", "2", "-t", "2",
            "--data-root", str(root), env=env,
        )  # fmt: skip
        result = next((out / "ws").rglob("vflflare_results.json"))
    record = json.loads(result.read_text())
    if "error" in record:
        raise RuntimeError(f"{method} seed {seed} {mode}: {record['error']}")
    comm = record["communication"]
    return {
        "method": method,
        "seed": seed,
        "mode": mode,
        "metrics": record["metrics"],
        "per_site": comm["per_site"],
        "per_phase": {p: row for p, row in comm["per_phase"].items()},
        "wall_s": record.get("wall_s"),
    }


def test_score(record: dict) -> float:
    """Test AUC, or a multi-class run's test accuracy (MNIST), or CFL's first silo's test accuracy."""
    metrics = record["metrics"]
    return metrics.get("test_auc", metrics.get("test_accuracy", next(v for k, v in metrics.items() if "test" in k)))


def key(record: dict) -> tuple:
    return record["method"], record["seed"], record["mode"]


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (method, seed, mode) not yet in `out`, appended as each ends."""
    modes = spec.settings["modes"]
    modes = [modes] if isinstance(modes, str) else list(modes)
    code = spec.settings["code"]
    env = {**os.environ, "PYTHONPATH": str(code)} if code else None
    done = {key(r) for r in read_jsonl(out)}
    with tempfile.TemporaryDirectory(prefix="vflflare-parity-") as work:
        for method in spec.methods:
            for seed in spec.seeds:
                for mode in modes:
                    if (method, seed, mode) in done:
                        continue
                    record = run_one(method, seed, mode, Path(work), data_dir, env, dict(spec.settings["job"]))
                    print(f"{method} seed {seed} {mode}: {record['metrics']}", flush=True)
                    append_jsonl(out, record)


PARITY = suite(
    Suite(
        name="parity",
        about="does a refactor move any number? every algorithm before and after, in process and simulated",
        runner=run,
        datasets=("credit_default",),
        methods=tuple(METHODS),
        more_methods=tuple(EXTRA_METHODS),
        settings={"modes": MODES, "code": None, "job": {}},  # job: JobConfig settings for every run
    )
)


def _by_key(path: Path) -> dict[tuple, dict]:
    return {key(r): r for r in read_jsonl(Path(path))}


def compare(before_path: Path, after_path: Path) -> tuple[str, int]:
    """The comparison table and its summary line; the number of runs that differ in metrics, message counts
    or payload bytes (wire bytes may move: they are shown, not compared)."""
    before, after = _by_key(before_path), _by_key(after_path)
    lines = [
        "| method | seed | mode | test AUC before | test AUC after | uploads/downloads per site | payload bytes "
        "per site | wire bytes per site (before → after) | same |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    moved = 0
    order = [*METHODS, *EXTRA_METHODS]
    for k in sorted(before, key=lambda k: (order.index(k[0]), k[1], k[2])):
        b, a = before[k], after.get(k)
        if a is None:
            lines.append(f"| {' | '.join(map(str, k))} | {test_score(b):.4f} | missing | | | | no |")
            moved += 1
            continue
        counts = lambda r: {s: (v["uploads"], v["downloads"]) for s, v in r["per_site"].items()}  # noqa: E731
        payload = lambda r: {s: v["payload_bytes"] for s, v in r["per_site"].items()}  # noqa: E731
        wire = lambda r: "/".join(str(v["wire_bytes"]) for v in r["per_site"].values())  # noqa: E731
        same = b["metrics"] == a["metrics"] and counts(b) == counts(a) and payload(b) == payload(a)
        moved += not same
        site_counts = "; ".join(f"{u}/{d}" for u, d in counts(a).values())
        site_payload = "/".join(str(v) for v in payload(a).values())
        lines.append(
            f"| {k[0]} | {k[1]} | {k[2]} | {test_score(b):.4f} | {test_score(a):.4f} | "
            f"{site_counts} | {site_payload} | {wire(b)} → {wire(a)} | {'yes' if same else '**no**'} |"
        )
    lines += ["", f"{len(before)} runs compared, {moved} differ in metrics, counts or payload bytes"]
    return "\n".join(lines) + "\n", moved


def changes(before_path: Path, after_path: Path) -> str:
    """For a change meant to move numbers: per method, the test AUC difference after - before per seed and
    its median, and whether the site's message counts stayed (a different early-stopping epoch moves them)."""
    before, after = _by_key(before_path), _by_key(after_path)
    lines = ["| method | median Δ test AUC | Δ per seed | uploads/downloads per site |", "|---|---|---|---|"]
    for method in METHODS:
        keys = sorted(k for k in before if k[0] == method and k in after)
        if not keys:
            continue
        deltas = [after[k]["metrics"]["test_auc"] - before[k]["metrics"]["test_auc"] for k in keys]
        first = lambda r: next(iter(r["per_site"].values()))  # noqa: E731
        counts = [
            (first(before[k])["uploads"], first(before[k])["downloads"], first(after[k])["downloads"]) for k in keys
        ]
        if all(
            first(before[k])["uploads"] == first(after[k])["uploads"] and b == a for k, (_, b, a) in zip(keys, counts)
        ):
            moved = f"same ({counts[0][0]} up, {counts[0][1]} down)"
        else:
            moved = "differ: " + ", ".join(f"{b} → {a}" for _, b, a in counts) + " downloads"
        lines.append(
            f"| {method} | {statistics.median(deltas):+.4f} | {', '.join(f'{d:+.4f}' for d in deltas)} | {moved} |"
        )
    return "\n".join(lines)


# table name -> the committed folder of its before.jsonl and after.jsonl
PAIRS = {
    "parity/issue9": "issue9_parity",
    "parity/issue25": "issue25_parity",
    "parity/issue27": "issue27_parity",
    "parity/issue28": "issue28_parity",
    "parity/issue29": "issue29_parity",
    "parity/issue29_split": "issue29_split_parity",
    "parity/issue36": "issue36_parity",
    "parity/issue37": "issue37_parity",
    "parity/issue39": "issue39_parity",
    "parity/issue40_ple": "issue40_ple",  # numeric_transform ple, vanilla and one-shot, in process
    "parity/issue40": "issue40_parity",  # going alone, tabular_ssl, PLE by the library: the defaults unchanged
    "parity/issue41": "issue41_parity",  # tables through Arrow, row-major preprocessing, the simulator's naming fix
    "parity/issue41_scoring": "issue41_scoring_parity",  # one pass per table, tiled fill, shared chunked forward
    "parity/issue41_views": "issue41_views_parity",  # the SSL views' statistics read a site's rows in place
    "parity/issue41_s6": "issue41_s6_parity",  # background imports, no pandas, the coordinator's deferred imports
    "parity/issue41_s7": "issue41_s7_parity",  # IDs and categories held in Arrow (data/strings.py)
    "parity/issue41_s8": "issue41_s8_parity",  # sites save their models on the coordinator's last request
    "parity/issue41_s9": "issue41_s9_parity",  # a CSV file parsed in spans, its numbers held in a temporary file
}
for _name, _folder in PAIRS.items():
    register(_name, lambda f=_folder: compare(COMMITTED / f / "before.jsonl", COMMITTED / f / "after.jsonl")[0])
register(
    "parity/stratified",
    lambda: changes(
        COMMITTED / "stratified_validation" / "before.jsonl", COMMITTED / "stratified_validation" / "after.jsonl"
    ),
)
