"""Submit a vflflare job to a provisioned NVFlare system with an admin startup kit, wait for it,
download the server's job workspace and print the results.

    .venv/bin/python provisioning/submit_job.py --kit ~/kits/analyst@bank.example.com jobs/oneshot_vfl

The job goes without code (a copy without the note that the simulator needs in app/custom): every site
runs the vflflare release it installed, and the job
fails at set-up, naming the site, when a site's vflflare differs from the server's. The submitter's
role needs the submit_job right on the server and on every site of the job (provisioning/project.yml:
`lead`, of an organisation the sites accept jobs from). A job with an app/custom folder is refused
("BYOC not permitted") wherever the submitter lacks the byoc right: everywhere, in the shipped policy.

Exit status: 0 when the job completed and its results have no "error", 1 when it failed or timed
out, 2 when it could not be submitted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from vflflare.flare.site_config import kit_username
from vflflare.results import RESULTS_FILE

COMPLETED = "FINISHED:COMPLETED"
STATUS_EVERY = 10.0  # seconds between the status lines printed while a job runs


def submit_copy(session, job: str | Path, sites: list[str] | None = None) -> str:
    """Submit a copy of `job` that names its sites (vflflare.jobs.name_sites: the coordinator refuses any other
    site by name, before it sends it anything), without the simulator's code note
    (vflflare.staging.without_code_note); a copy, because NVFlare signs the folder it submits in place."""
    from vflflare.jobs import expected_sites, name_sites
    from vflflare.staging import without_code_note

    with tempfile.TemporaryDirectory(prefix="vflflare_submit_") as tmp:
        copy = Path(tmp) / Path(job).name
        shutil.copytree(job, copy)
        if sites:
            name_sites(copy, sites)
        elif (copy / "meta.json").is_file() and not expected_sites(copy)[1] and _is_vflflare(copy):
            raise ValueError(
                f"{Path(job).name} names no sites: a provisioned job's parties are explicit, so that no "
                f"other site of the project takes part; give them (--sites site-a,site-b)"
            )
        return session.submit_job(str(without_code_note(copy)))


def _is_vflflare(job: Path) -> bool:
    return any("vflflare.flare." in p.read_text() for p in job.glob("*/config/config_fed_server.json"))


def submit_and_collect(
    kit: str | Path,
    job: str | Path,
    out: str | Path,
    user: str | None = None,
    timeout: float = 1800,
    connect_timeout: float = 60,
    log=print,
    sites: list[str] | None = None,
) -> dict:
    """Submit `job` with the admin kit, wait up to `timeout` s, download the server's job workspace
    into `out`. Returns {"job_id", "status", "results_path" (or None), "results" (or None)}."""
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    kit, job, out = Path(kit).resolve(), Path(job).resolve(), Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    user = user or kit_username(kit)
    session = new_secure_session(user, str(kit), timeout=connect_timeout)
    try:
        job_id = submit_copy(session, job, sites)
        log(f"submitted {job.name} as {user}: job {job_id}")
        started, shown = time.monotonic(), [0.0]

        def progress(_session, _job_id, meta: dict) -> bool:  # a status line every STATUS_EVERY s
            waited = time.monotonic() - started
            if waited - shown[0] >= STATUS_EVERY:
                shown[0] = waited
                log(f"job {job_id}: {meta.get('status')} after {waited:.0f} s")
            return True

        _, meta = session.monitor_job_and_return_job_meta(job_id, timeout=timeout, poll_interval=2.0, cb=progress)
        if meta is None:  # the monitor's timeout
            status = f"TIMEOUT after {timeout:.0f} s"
            session.abort_job(job_id)
        else:
            status = str(meta.get("status"))
        log(f"job {job_id}: {status}")
        location = session.download_job_result(job_id, str(out))
    finally:
        session.close()
    results_path = Path(location) / "workspace" / RESULTS_FILE if location else None
    results = json.loads(results_path.read_text()) if results_path and results_path.is_file() else None
    if results is not None:  # where the printed scoring command runs (vflflare.results.scoring_command)
        results.setdefault("environment", {"kind": "prod", "startup_kit": str(kit)})
    return {"job_id": job_id, "status": status, "results_path": results_path if results else None, "results": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job", help="job folder, e.g. jobs/oneshot_vfl")
    parser.add_argument("--kit", required=True, help="the submitter's admin startup kit (folder holding startup/)")
    parser.add_argument(
        "--sites",
        required=True,
        help="the job's sites by name, e.g. site-insurer,site-telco: "
        "exactly these take part (any other site of the project is refused by name)",
    )
    parser.add_argument("--user", help="admin user name (default: the kit's)")
    parser.add_argument("--out", default="vflflare_results", help="where downloaded job results go")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the job")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        sites = [s.strip() for s in args.sites.split(",") if s.strip()]
        outcome = submit_and_collect(args.kit, args.job, args.out, args.user, args.timeout, sites=sites)
    except Exception as error:  # connection, authorization or submission failure
        print(f"submit_job: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    results = outcome["results"]
    if results is None:
        print(f"FAILED: job {outcome['job_id']} ({outcome['status']}) left no {RESULTS_FILE}", file=sys.stderr)
        return 1
    from vflflare.results import format_table

    print(format_table(results))
    print(f"job {outcome['job_id']}: {outcome['status']} in {time.monotonic() - t0:.0f} s")
    print(f"results: {outcome['results_path']}")
    if "error" in results:
        print(f"FAILED: {results['error']}", file=sys.stderr)
        return 1
    return 0 if outcome["status"] == COMPLETED else 1


if __name__ == "__main__":
    sys.exit(main())
