"""Rehearse the provisioned deployment on one machine, step by step as README "Rehearse on one machine"
describes it, with the real startup kits, start.sh scripts and admin API:

    .venv/bin/python provisioning/rehearse.py --out /tmp/vfl_rehearsal [--job jobs/oneshot_vfl] [--data-root SPLIT]

1. a copy of project.yml whose server is `localhost` (`default_host`) on free ports, provisioned into
   OUT/prov (`nvflare provision`);
   With `--sites broker,insurer` (or a `--data-root` whose site folders are named so), the copy's sites are
   those: each its own organisation with an admin `it@<site>.example.com`, accepting the server's
   organisation's jobs;
2. data: `--data-root`, a split whose folders are named as the sites (and `server/` for the labels), else
   a breast-cancer split for them written to OUT/data; each kit's `local/vflflare.json` names it;
3. each server and site kit's `startup/start.sh`, with this environment's `bin` first on PATH (the
   kits call `python3`);
4. the job, submitted as the project's `lead` user once every site is connected, its status printed while it
   runs, its result downloaded into OUT/results (provisioning/submit_job.py);
5. each site shut down by its own organisation's admin, then the server by the project admin (admin API;
   least privilege: nobody else may), then any process of the kits still running is stopped.

Exit status: 0 when the job completed without error, 1 otherwise. Every process it started is stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from submit_job import submit_and_collect  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def localhost_project(source: Path, dest: Path, fl_port: int, admin_port: int) -> dict:
    """A copy of project.yml whose server listens on the given localhost ports (sites and admins connect to
    localhost; the server keeps its name, which its TLS certificate is issued for)."""
    project = yaml.safe_load(source.read_text())
    server = next(p for p in project["participants"] if p["type"] == "server")
    server.update({"fed_learn_port": fl_port, "admin_port": admin_port, "default_host": "localhost"})
    dest.write_text(yaml.safe_dump(project, sort_keys=False))
    return project


def participants(project: dict, kind: str) -> list[dict]:
    return [p for p in project["participants"] if p["type"] == kind]


def with_sites(project: dict, sites: list[str]) -> dict:
    """`project` whose sites are `sites`: each its own organisation, with an org admin, accepting jobs from
    the server's organisation. The server and its organisation's users stay; the other organisations go."""
    (server,) = participants(project, "server")
    gone = {p["org"] for p in participants(project, "client")} - {server["org"]}
    kept = [p for p in project["participants"] if p["type"] != "client" and p.get("org") not in gone]
    for site in sites:
        kept.append({"name": site, "type": "client", "org": site, "accept_jobs_from": [server["org"]]})
        kept.append({"name": f"it@{site}.example.com", "type": "admin", "org": site, "role": "org_admin"})
    project["participants"] = kept
    return project


@contextlib.contextmanager
def quiet(verbose: bool):
    """Without --verbose, the admin API's "Connecting to FLARE ..." lines and NVFlare's connection warnings
    (a shut-down server is unreachable, on purpose) stay out of the output."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in ("nvflare", "")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def venv_env() -> dict:
    """This environment with the running interpreter's bin first on PATH: what the kits' `python3` must be."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VFLFLARE_DATA_ROOT", None)  # each kit's local/vflflare.json names its data
    return env


def provision(project_file: Path, out: Path) -> Path:
    """`nvflare provision`; the prod_00 folder holding every participant's startup kit."""
    subprocess.run(
        [sys.executable, "-m", "nvflare.cli", "provision", "-p", str(project_file), "-w", str(out), "--force"],
        check=True,
        stdout=subprocess.DEVNULL,
        env=venv_env(),
    )
    return sorted(out.glob("*/prod_00"))[0]


def wait_until_connected(kit: Path, user: str, sites: list[str], timeout: float):
    """An admin session once the server answers and every site is connected."""
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        session = None
        try:
            session = new_secure_session(user, str(kit), timeout=10)
            last = sorted(c.name for c in session.get_system_info().client_info)
            if set(sites) <= set(last):
                return session
            session.close()
        except Exception as error:  # the server is still starting
            last = f"{type(error).__name__}: {error}"
            if session is not None:
                session.close()
        time.sleep(2)
    raise TimeoutError(f"sites {sites} not connected within {timeout:.0f} s (last: {last})")


def shutdown(prod: Path, site_admins: dict[str, str | None], operator: str, log=print) -> None:
    """Each site by its organisation's admin, then the server by the project admin: under the project's
    least-privilege policy nobody may stop another organisation's site."""
    steps = [(admin, "client", [site]) for site, admin in site_admins.items() if admin] + [(operator, "server", None)]
    for user, target, sites in steps:
        try:
            admin = wait_until_connected(prod / user, user, [], 30)
            try:
                admin.shutdown(target, sites)
            finally:
                admin.close()
            log(f"5. shut down {sites[0] if sites else 'the server'} as {user}")
        except Exception as error:  # the system is already down or never came up
            log(f"5. shutdown of {sites[0] if sites else 'the server'} as {user}: {type(error).__name__}: {error}")


def stop_kits(procs: list[subprocess.Popen]) -> None:
    """What `shutdown all` left running: each start.sh's process group (the restart loop and its service)."""
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    time.sleep(2)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a new folder for kits, data, logs and results")
    parser.add_argument("--job", type=Path, default=REPO / "jobs" / "oneshot_vfl")
    parser.add_argument("--project", type=Path, default=HERE / "project.yml")
    parser.add_argument("--data-root", type=Path, help="a split with one folder per site and server/")
    parser.add_argument(
        "--sites",
        help="the sites' names, e.g. broker,insurer (default: the site folders of "
        "--data-root, else the project's sites)",
    )
    parser.add_argument("--verbose", action="store_true", help="also NVFlare's connection messages")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the job")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    fl_port = free_port()
    admin_port = free_port()
    project = localhost_project(args.project, out / "project.yml", fl_port, admin_port)
    from vflflare.protocol.topology import check_unique, site_folders

    names = (
        [n.strip() for n in args.sites.split(",") if n.strip()]
        if args.sites
        else site_folders(args.data_root)
        if args.data_root
        else []
    )
    if names and names != sorted(p["name"] for p in participants(project, "client")):
        if len(check_unique(names, "--sites")) < 2:
            parser.error(f"vertical FL needs at least 2 sites, got {names}")
        project = with_sites(project, names)
        (out / "project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    prod = provision(out / "project.yml", out / "prov")
    (server,) = participants(project, "server")
    sites = [p["name"] for p in participants(project, "client")]
    lead = next(p["name"] for p in participants(project, "admin") if p["role"] == "lead")
    operator = next(p["name"] for p in participants(project, "admin") if p["role"] == "project_admin")
    site_admins = {
        s["name"]: next(
            (
                p["name"]
                for p in participants(project, "admin")
                if p["role"] in ("org_admin", "project_admin") and p["org"] == s["org"]
            ),
            None,
        )
        for s in participants(project, "client")
    }
    print(f"1. provisioned {len(project['participants'])} kits into {prod} (server on localhost:{fl_port})")

    data = args.data_root.resolve() if args.data_root else out / "data"
    if not args.data_root:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "vflflare.cli",
                "split",
                "--dataset",
                "breast_cancer",
                "--sites",
                ",".join(sites),
                "--overlap",
                "150",
                "--out",
                str(data),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    from vflflare.flare.site_config import write_site_config

    kits = [prod / server["name"], *(prod / s for s in sites)]
    for kit in kits:
        write_site_config(kit, data)
    print(f"2. data root {data}: {', '.join(sites)} and server/ (each kit's local/vflflare.json)")

    procs: list[subprocess.Popen] = []
    try:
        for kit in kits:
            log = open(out / f"{kit.name}.console.log", "w")
            procs.append(
                subprocess.Popen(
                    ["bash", str(kit / "startup" / "start.sh")],
                    cwd=kit,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=venv_env(),
                    start_new_session=True,
                )
            )
            if kit == kits[0]:
                time.sleep(3)  # the server first, as its operator would
        with quiet(args.verbose):
            wait_until_connected(prod / lead, lead, sites, 180).close()
        print(f"3. started {', '.join(k.name for k in kits)}; every site connected")
        with quiet(args.verbose):
            outcome = submit_and_collect(
                prod / lead,
                args.job,
                out / "results",
                lead,
                timeout=args.timeout,
                connect_timeout=30,
                sites=sites,
                log=lambda line: print(f"4. {line}", flush=True, file=sys.__stdout__),
            )
        results = outcome["results"]
        if results is not None:
            from vflflare.results import format_table

            print(format_table(results))
        print(f"results: {outcome['results_path']}")
        ok = outcome["status"] == "FINISHED:COMPLETED" and results is not None and "error" not in results
    finally:
        with quiet(args.verbose):
            shutdown(prod, site_admins, operator, log=lambda line: print(line, flush=True, file=sys.__stdout__))
        stop_kits(procs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
