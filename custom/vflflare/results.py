"""The job's result record (vflflare_results.json) and the table printed at the end of a run.

Every record a job writes has "status": "completed", or "failed" with "error" (the reason), "phase"
(where it happened), "site" (the site to blame, or null) and "progress" (what was done before).
"""
from __future__ import annotations

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
    lines = [f"vflflare {results['algorithm']}  seed {results.get('seed')}  sites {', '.join(results['sites'])}  "
             f"label owner {results.get('label_owner')}  wall {results.get('wall_s', 0):.1f} s"]
    if "error" in results:
        where = f" in phase {results['phase']}" if results.get("phase") else ""
        where += f" (site {results['site']})" if results.get("site") else ""
        lines.append(f"FAILED{where}: {results['error']}")
    if results.get("run_id"):
        lines.append(f"  run id {results['run_id']} (resume: {results['run_id']}), "
                     f"{results.get('replayed_exchanges', 0)} exchange(s) replayed")
    for name, value in sorted(results.get("metrics", {}).items()):
        shown = f"{int(value)}" if name.endswith("rows") and float(value).is_integer() else f"{value:.4f}"
        lines.append(f"  {name:<28} {shown}")  # a count as an integer, a score to 4 places
    if "dp" in results.get("privacy", {}):
        from vflflare.privacy.accounting import describe  # noqa: PLC0415 - keeps this module light

        lines += describe(results["privacy"]["dp"])
    alignment = results.get("alignment")
    if alignment and "union" in alignment:  # a silo space (protocol/silo_setup.py)
        lines.append(f"  silo space: {alignment['union']} training rows in the union, {alignment['in_every_silo']} in "
                     f"every silo; " + ", ".join(f"{s} {n}" for s, n in alignment["per_site"].items()))
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
            line = (f"  {name:<26} {row['uploads']:>8} {row['downloads']:>9} "
                    f"{_mb(row['payload_bytes']):>11} {_mb(row['wire_bytes']):>9}")
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
    ("DataError", "fix the file named above; `vflflare check-data <data root>` lists every such problem at once"),
    ("AlignmentError", "`vflflare check-data <data root>` shows the rows each party shares and the id_normalize hint"),
    ("ConfigError", "fix the setting named above; `vflflare settings --algorithm <name>` lists every setting"),
    ("ModelStoreError", "score with the model of one training job at every party (`model_job`), unchanged since"),
    ("ResumeError", "resume with the run id and settings of the stopped run, on the same data"),
    ("TransportError", "check that the site named above is running and connected, then submit the job again"),
)


def next_steps(results: dict) -> list[str]:
    """The last lines: for a failed job, what to do about it; where a training job's models are and the
    command that scores with them; where a scoring job's predictions are."""
    if "error" in results:
        fix = next((hint for name, hint in FIXES if name in results["error"]), None)
        return [f"FAILED: {results['error'].splitlines()[0][:300]}"] + ([f"what to do: {fix}"] if fix else [])
    scored = results.get("training", {})
    if results.get("algorithm") == "vertical_inference" and scored.get("predictions"):
        where = f"at {scored.get('label_owner')}: {scored['predictions']}"
        if scored.get("predictions_in_job"):
            where += f" (a copy, {scored['predictions_in_job']}, in this job's result folder for download_job)"
        return [f"predictions {where}"]
    if results.get("job_id") and "union" not in results.get("alignment", {}):  # a silo space keeps no model
        job = results["job_id"]
        here = f"; the label model here: {results['label_model']}" if results.get("label_model") else ""
        return [f"models of job {job} kept by each party under its runs root (its data root, or VFLFLARE_RUNS_ROOT)"
                f"{here}",
                f"score new rows (score.csv beside each site's train.csv): python job.py --algorithm vertical_inference "
                f"--set model_job={job} --env sim|poc|prod (or `vflflare simulate jobs/vertical_inference`)"]
    return []
