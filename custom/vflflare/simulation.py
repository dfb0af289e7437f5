"""Running a job folder in NVFlare's simulator from Python (`vflflare simulate`, the tests, the benchmarks and
`vflflare attack --simulator`), with vflflare's quiet console."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from vflflare.protocol.topology import check_unique
from vflflare.results import RESULTS_FILE

SIMULATOR_MODULE = "vflflare.simulation"  # `python -m vflflare.simulation JOB -w WS -n N -t T`: main() below


def find_results(workspace: str | Path) -> Path | None:
    found = sorted(Path(workspace).rglob(RESULTS_FILE), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def quiet_log_config() -> str:
    """NVFlare's own log configuration with its console at WARNING and vflflare's lines (progress, the
    alignment report, the results table) at INFO, as `time message`; the log files in the workspace keep
    everything. A file for `nvflare simulator -l`, outside the workspace (the simulator empties it)."""
    from nvflare.fuel.utils.log_utils import default_log_dict

    config = json.loads(json.dumps(default_log_dict))
    config["handlers"]["consoleHandler"]["level"] = "WARNING"
    config["filters"]["notVflflare"] = {"()": "vflflare.tracking.ConsoleLines", "own": False}
    config["handlers"]["consoleHandler"].setdefault("filters", []).append("notVflflare")
    config["formatters"]["vflflareConsole"] = {"format": "%(asctime)s %(message)s", "datefmt": "%H:%M:%S"}
    config["filters"]["vflflareOnly"] = {"()": "vflflare.tracking.ConsoleLines"}
    config["handlers"]["vflflareConsole"] = {
        "class": "logging.StreamHandler",
        "level": "INFO",
        "stream": "ext://sys.stdout",
        "formatter": "vflflareConsole",
        "filters": ["vflflareOnly"],
    }
    config["loggers"]["root"]["handlers"].append("vflflareConsole")
    path = Path(tempfile.mkdtemp(prefix="vflflare_log_")) / "log_config.json"
    path.write_text(json.dumps(config, indent=2))
    return str(path)


def simulate(
    job: str,
    workspace: str,
    n_clients: int,
    threads: int,
    data_root: str | None = None,
    timeout: float | None = None,
    sites: list[str] | None = None,
    verbose: bool = True,
    console: Any = None,
) -> dict:
    """Run `nvflare simulator` on a job folder and return its vflflare_results.json. `sites` names the
    simulated sites (default site-1 .. site-n); without `verbose` the console shows NVFlare's warnings and
    vflflare's own lines only; `console`: where the simulator's output goes (default: stdout)."""
    env = dict(os.environ)
    if data_root:
        env["VFLFLARE_DATA_ROOT"] = str(Path(data_root).resolve())
    stale = find_results(workspace) if Path(workspace).exists() else None
    if stale:
        stale.unlink()
    # the nvflare CLI of this interpreter's environment, whatever PATH says
    clients = ["-c", ",".join(check_unique(sites, "the simulated sites"))] if sites else ["-n", str(n_clients)]
    # NVFlare's simulator (as `nvflare simulator` runs it), with its site-naming race closed (main below)
    cmd = [
        sys.executable,
        "-m",
        SIMULATOR_MODULE,
        str(job),
        "-w",
        str(workspace),
        *clients,
        "-t",
        str(threads),
    ]
    if not verbose:
        cmd += ["-l", quiet_log_config()]
    proc = subprocess.run(cmd, env=env, timeout=timeout, stdout=console)
    path = find_results(workspace)
    if path is None:
        raise RuntimeError(f"the simulator (exit code {proc.returncode}) wrote no {RESULTS_FILE} under {workspace}")
    results = json.loads(path.read_text())
    results["results_path"] = str(path)
    return results


def main(argv: list[str] | None = None) -> int:
    """NVFlare's simulator command (its own arguments), after serialise_client_starts: without it, two sites
    starting at once can run under one site's name (flare/simulator_fix.py)."""
    import argparse

    from nvflare.private.fed.app.simulator.simulator import define_simulator_parser, run_simulator
    from nvflare.private.fed.app.utils import version_check

    from vflflare.flare.simulator_fix import serialise_client_starts

    serialise_client_starts()
    version_check()
    parser = argparse.ArgumentParser(prog=f"python -m {SIMULATOR_MODULE}")
    define_simulator_parser(parser)
    return run_simulator(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
