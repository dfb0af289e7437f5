"""The job's result record (vflflare_results.json) and the table printed at the end of a run.

Every record a job writes has "status": "completed", or "failed" with "error" (the reason), "phase"
(where it happened), "site" (the site to blame, or null) and "progress" (what was done before).
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # deployment scripts import this module for RESULTS_FILE: keep it light
    from vflflare.protocol.ledger import CommLedger

RESULTS_FILE = "vflflare_results.json"
COMPLETED, FAILED = "completed", "failed"


def completed(results: dict[str, Any]) -> dict[str, Any]:
    """A finished run's record, marked as such."""
    return {"status": COMPLETED, **results}


def failed(algorithm: str, sites: list[str], error: str, site: str | None, ledger: CommLedger) -> dict[str, Any]:
    """The record of a run that stopped with `error`: where (phase, site) and how far it got."""
    phase = ledger.failure_phase()
    return {
        "status": FAILED,
        "algorithm": algorithm,
        "sites": sites,
        "error": error,
        "phase": phase,
        "site": site,
        "progress": {
            "phases_completed": [p["name"] for p in ledger.phases if not p.get("failed")],
            "split_steps": ledger.steps_done(),
        },
        "communication": ledger.summary(),
        "phases": ledger.phases,
        "wall_s": ledger.wall_s(),
    }


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.3f}"


def format_table(results: dict) -> str:
    lines = [
        f"vflflare {results['algorithm']}  seed {results.get('seed')}  sites {', '.join(results['sites'])}  "
        f"label owner {results.get('label_owner')}  wall {results.get('wall_s', 0):.1f} s"
    ]
    if "error" in results:
        where = f" in phase {results['phase']}" if results.get("phase") else ""
        where += f" (site {results['site']})" if results.get("site") else ""
        lines.append(f"FAILED{where}")  # what failed: the last lines (next_steps), once
    classes = results.get("classes") or results.get("training", {}).get("classes")
    if classes:  # labels.json named the classes: class id = position
        lines.append(f"  {'classes':<28} " + ", ".join(f"{name} ({c})" for c, name in enumerate(classes)))
    if results.get("run_id"):
        lines.append(
            f"  run id {results['run_id']} (resume: {results['run_id']}), "
            f"{results.get('replayed_exchanges', 0)} exchange(s) replayed"
        )
    for name, value in sorted(results.get("metrics", {}).items()):
        shown = f"{int(value)}" if name.endswith("rows") and float(value).is_integer() else f"{value:.4f}"
        lines.append(f"  {name:<28} {shown}")  # a count as an integer, a score to 4 places
    if "going_alone" in results:
        from vflflare.protocol.going_alone import describe  # noqa: PLC0415 - keeps this module light

        lines += describe(results["going_alone"])
    if "dp" in results.get("privacy", {}):
        from vflflare.privacy.accounting import describe  # noqa: PLC0415 - keeps this module light

        lines += describe(results["privacy"]["dp"])
    alignment = results.get("alignment")
    if alignment and "union" in alignment:  # a silo space (protocol/silo_setup.py)
        lines.append(
            f"  silo space: {alignment['union']} training rows in the union, {alignment['in_every_silo']} in "
            f"every silo; " + ", ".join(f"{s} {n}" for s, n in alignment["per_site"].items())
        )
    elif alignment:
        from vflflare.protocol.alignment_report import format_report  # noqa: PLC0415 - keeps this module light

        lines.append("  alignment (matched/rows per party):\n" + format_report(alignment))
    comm = results.get("communication", {})
    header = f"  {'':<26} {'uploads':>8} {'downloads':>9} {'payload MB':>11} {'wire MB':>9}"
    expected = results.get("expected_communication", {})
    if expected:
        header += "  expected by the algorithm (uploads/downloads)"
    rows = [("total", comm.get("total", {}), None)]
    rows += [(f"site {s}", v, expected.get(s)) for s, v in comm.get("per_site", {}).items()]
    rows += [(f"phase {p}", v, None) for p, v in comm.get("per_phase", {}).items()]
    lines.append(header)
    for name, row, want in rows:
        if row:
            line = (
                f"  {name:<26} {row['uploads']:>8} {row['downloads']:>9} "
                f"{_mb(row['payload_bytes']):>11} {_mb(row['wire_bytes']):>9}"
            )
            if want:
                same = (want["uploads"], want["downloads"]) == (row["uploads"], row["downloads"])
                line += f"  {want['uploads']}/{want['downloads']}{'' if same else '  MISMATCH'}"
            lines.append(line)
    per_phase_site = comm.get("per_phase_site", {})
    if per_phase_site:
        sites = results["sites"]
        lines.append("  uploads/downloads per phase and site: " + "  ".join(f"{s:>12}" for s in sites))
        for phase, row in per_phase_site.items():
            cells = [f"{row.get(s, {}).get('uploads', 0)}/{row.get(s, {}).get('downloads', 0)}" for s in sites]
            lines.append(f"  {phase:<38}" + "  ".join(f"{c:>12}" for c in cells))
    if results.get("phases"):
        wall: dict[str, float] = {}  # a phase run once per global iteration is summed
        for p in results["phases"]:
            wall[p["name"]] = wall.get(p["name"], 0.0) + p["wall_s"]
        lines.append("  phase wall time (s): " + ", ".join(f"{name} {s:.2f}" for name, s in wall.items()))
    return "\n".join(lines + next_steps(results))


FIXES = (  # (an error type named in the failure, what to do): the first that appears wins
    (
        "DataError",
        "fix the file named above; `vflflare check-data --data-root <data root>` lists every such problem at once",
    ),
    (
        "AlignmentError",
        "`vflflare check-data --data-root <data root>` shows the rows each party shares and the id_normalize hint",
    ),
    ("ConfigError", "fix the setting named above; `vflflare settings --algorithm <name>` lists every setting"),
    (
        "ModelStoreError",
        "score with one saved model at every party (`--set model_job=<model id>`; `vflflare models "
        "--data-root <data root>` lists them), unchanged since it was saved",
    ),
    ("ResumeError", "resume with the run id and settings of the stopped run, on the same data"),
    ("TransportError", "check that the site named above is running and connected, then submit the job again"),
)


NO_FILE_FIX = (
    "check the data root and the site names above (each site reads <data root>/<site name>/); "
    "`vflflare check-data --data-root <data root>` lists the folders it finds"
)


def next_steps(results: dict) -> list[str]:
    """The last lines: for a failed job, what to do about it; where a training job's models are and the
    command that scores with them; where a scoring job's predictions are."""
    if "error" in results:
        fix = next((hint for name, hint in FIXES if name in results["error"]), None)
        if fix == FIXES[0][1] and not re.search(r"\.(csv|json|parquet|png)\b", results["error"]):
            fix = NO_FILE_FIX  # a data error that names no file: a folder or a site name
        return [f"FAILED: {results['error'].splitlines()[0][:300]}"] + ([f"what to do: {fix}"] if fix else [])
    scored = results.get("training", {})
    if results.get("algorithm") == "vertical_inference" and scored.get("predictions"):
        where = f"at {scored.get('label_owner')}: {scored['predictions']}"
        if scored.get("predictions_in_job"):
            where += f" (a copy, {scored['predictions_in_job']}, in this job's result folder for download_job)"
        lines = [f"predictions of model {scored.get('model_job')} {where}"]
        if scored.get("predictions_about"):
            lines.append(f"which model, which rows, when: {scored['predictions_about']}")
        return lines
    model = results.get("model_id") or results.get("job_id")
    if model and "union" not in results.get("alignment", {}):  # a silo space keeps no model
        environment = results.get("environment") or {}
        root = environment.get("data_root")
        here = f"; the label model here: {results['label_model']}" if results.get("label_model") else ""
        lines = [f"model {model} kept by each party under its runs root (its data root, or VFLFLARE_RUNS_ROOT){here}"]
        if environment.get("kind") in ("simulator", "poc") and not root:
            return lines + [
                "to score new rows, train on a data root of your own (--data-root ROOT) and put score.csv "
                "beside each site's train.csv: the embedded default has no folder to read it from"
            ]
        if root:
            lines.append(f"list the models there: {shlex.join([_vflflare(), 'models', '--data-root', str(root)])}")
        from vflflare.config import SERVER  # noqa: PLC0415 - numpy: the deployment scripts import this module

        where = "score.csv beside each site's train.csv"
        if results.get("label_owner") == SERVER:  # it scores only IDs it holds (protocol/scoring.py)
            where += f", and the IDs to score in {SERVER}/score.csv"
        return lines + [f"score new rows ({where}): {scoring_command(results)}"]
    return []


def _vflflare() -> str:
    """The `vflflare` command of this interpreter's environment, else `vflflare` from PATH."""
    beside = Path(sys.executable).parent / "vflflare"
    return str(beside) if beside.is_file() else "vflflare"


def _launcher() -> list[str]:
    """This interpreter and, beside the package's source folder, the repository's job.py (else job.py in the
    current folder)."""
    job_py = Path(__file__).resolve().parents[2] / "job.py"
    return [sys.executable, str(job_py) if job_py.is_file() else "job.py"]


def scoring_command(results: dict) -> str:
    """The command that scores new rows with a training run's model, to paste as is: the run's sites by name, its
    label owner, its model ID and, where the run's environment is known (results "environment": kind
    simulator or poc with the data root, prod with the admin startup kit), where to run."""
    model = results.get("model_id") or results.get("job_id")
    command = [*_launcher(), "--algorithm", "vertical_inference", "--sites", ",".join(results["sites"])]
    if results.get("label_owner") not in (None, "server"):
        command += ["--label-owner", str(results["label_owner"])]
    command += ["--set", f"model_job={model}"]
    environment = results.get("environment") or {}
    kind = environment.get("kind")
    if kind in ("simulator", "poc") and environment.get("data_root"):
        command += ["--env", "sim" if kind == "simulator" else "poc", "--data-root", str(environment["data_root"])]
    elif kind == "prod" and environment.get("startup_kit"):
        command += ["--env", "prod", "--startup-kit", str(environment["startup_kit"])]
    else:
        return shlex.join(command) + " --env poc|prod (poc: --data-root ROOT; prod: --startup-kit ADMIN_KIT)"
    return shlex.join(command)
