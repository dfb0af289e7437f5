"""Helpers for the tests that run real NVFlare processes on localhost (POC, provisioned kits).

Every process these helpers start is stopped before they return, also on failure or timeout: a
command runs in its own session, is asked to stop (SIGTERM to its group) when it overruns, then
killed, and finally everything whose command line names the test's own temporary workspace is
stopped too (NVFlare launches each job in a new session, so process groups alone do not cover it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POC_RUN = REPO / "poc" / "run.sh"
PROVISIONING = REPO / "provisioning"
VENV_BIN = Path(sys.executable).parent

for _folder in (REPO / "poc", PROVISIONING):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

from vflflare.poc.processes import free_port, stop_processes  # noqa: E402, F401 (free_port: re-exported to the tests)


@dataclass
class Finished:
    returncode: int
    output: str
    wall_s: float


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_bounded(
    cmd: list[str],
    timeout: float,
    marker: str | Path,
    log: Path,
    env: dict | None = None,
    cwd: str | Path | None = None,
    grace_s: float = 90.0,
) -> Finished:
    """Run `cmd` in its own session with output to `log`. Past `timeout` it gets SIGTERM (time to
    clean up after itself, up to grace_s), then SIGKILL. Then every process naming `marker` in its
    command line is stopped."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            returncode = -1
        finally:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            stop_processes(marker)
    output = Path(log).read_text(errors="replace")
    if returncode == -1:
        output += f"\n[test] timed out after {timeout:.0f} s: {' '.join(map(str, cmd))}"
    return Finished(returncode, output, time.monotonic() - t0)


def results_path_from(output: str) -> Path | None:
    """The path after 'results: ' in a run's output (poc/run.sh, vflflare simulate)."""
    for line in reversed(output.splitlines()):
        if line.startswith("results: "):
            return Path(line[len("results: ") :].strip())
    return None


def simulator_cmd(job: Path, workspace: Path, sites: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nvflare.cli",
        "simulator",
        str(job),
        "-w",
        str(workspace),
        "-n",
        str(sites),
        "-t",
        str(sites),
    ]


def find_results(workspace: Path) -> dict | None:
    found = sorted(workspace.rglob("vflflare_results.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()) if found else None


def env_with(**extra: str | None) -> dict:
    """This environment with the venv's bin first on PATH (NVFlare's start scripts call `python3`),
    `extra` set, and keys given as None removed."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# ---------------------------------------------------------------- provisioned deployments
def localhost_project(source: Path, dest: Path, fl_port: int, admin_port: int) -> dict:
    """A copy of project.yml whose server listens on the given localhost ports (sites and admins
    connect to localhost; the server keeps its name, which its TLS certificate is issued for)."""
    import yaml

    project = yaml.safe_load(source.read_text())
    server = next(p for p in project["participants"] if p["type"] == "server")
    server.update({"fed_learn_port": fl_port, "admin_port": admin_port, "default_host": "localhost"})
    dest.write_text(yaml.safe_dump(project, sort_keys=False))
    return project


def provision(project_file: Path, workspace: Path, log: Path) -> Path:
    """`nvflare provision`; returns the prod_00 folder holding every participant's startup kit."""
    result = run_bounded(
        [sys.executable, "-m", "nvflare.cli", "provision", "-p", str(project_file), "-w", str(workspace), "--force"],
        180,
        workspace,
        log,
        env=env_with(),
    )
    assert result.returncode == 0, result.output[-4000:]
    kits = sorted(workspace.glob("*/prod_00"))
    assert kits, f"no startup kits under {workspace}:\n{result.output[-2000:]}"
    return kits[0]


@contextmanager
def running_kits(
    kits: list[Path], marker: Path, log_dir: Path, env: dict | None = None
) -> Iterator[list[subprocess.Popen]]:
    """Start each kit's service (`startup/sub_start.sh --once`: the server or site process itself,
    without start.sh's restart loop) in its own session; stop all of them on exit, whatever
    happened."""
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        for kit in kits:
            out = open(log_dir / f"{kit.name}.console.log", "w")
            logs.append(out)
            procs.append(
                subprocess.Popen(
                    ["bash", str(kit / "startup" / "sub_start.sh"), "--once"],
                    cwd=kit,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env or env_with(VFLFLARE_DATA_ROOT=None),
                    start_new_session=True,
                )
            )
        yield procs
    finally:
        for proc in procs:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        stop_processes(marker)
        for out in logs:
            out.close()


def wait_for_clients(kit: Path, user: str, clients: list[str], timeout: float, procs: list[subprocess.Popen]):
    """An admin session once the server answers and every site is connected."""
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    deadline = time.monotonic() + timeout
    session, last = None, None
    while time.monotonic() < deadline:
        dead = [p.args for p in procs if p.poll() is not None]
        assert not dead, f"a service exited early: {dead}"
        try:
            if session is None:
                session = new_secure_session(user, str(kit), timeout=10)
            info = session.get_system_info()
            connected = sorted(c.name for c in info.client_info)
            last = connected
            if set(clients) <= set(connected):
                return session
        except Exception as error:  # the server is still starting
            last = f"{type(error).__name__}: {error}"
            if session is not None:
                try:
                    session.close()
                except Exception:
                    pass
                session = None
        time.sleep(2)
    if session is not None:
        session.close()
    raise AssertionError(f"sites {clients} not connected within {timeout:.0f} s (last: {last})")


HIDE_ENV = "VFLFLARE_TEST_HIDE_PATH"
SITECUSTOMIZE = f"""# written by tests/deployment_helpers.py: drop the installed vflflare from sys.path, so that
# NVFlare's processes see a machine without vflflare and must load it from the job's app/custom
import os, sys
_hide = os.environ.get("{HIDE_ENV}")
if _hide:
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != os.path.realpath(_hide)]
"""


def env_without_vflflare(folder: Path) -> dict:
    """An environment whose Python processes cannot import the installed vflflare (an editable
    install puts REPO/custom on sys.path; a sitecustomize removes it again, in every child too)."""
    import vflflare

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    installed = Path(vflflare.__file__).resolve().parents[1]
    return env_with(VFLFLARE_DATA_ROOT=None, PYTHONPATH=str(folder), **{HIDE_ENV: str(installed)})


# ---------------------------------------------------------------- job processes
def job_worker_pid(job_id: str, site: str) -> int | None:
    """The pid of `site`'s job process for `job_id` (NVFlare's client worker_process, started with
    `-n <job id> -c <site>`), or None while there is none."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not any(a.endswith("worker_process") for a in args) or job_id not in args:
            continue
        if "-c" in args and args.index("-c") + 1 < len(args) and args[args.index("-c") + 1] == site:
            return int(entry.name)
    return None


def wait_for_text(path: Path, text: str, timeout: float, fail_text: str | None = None) -> float:
    """Wait until the file at `path` contains `text`; returns the seconds waited. Raises
    AssertionError after `timeout`, or at once when `fail_text` shows up instead."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            content = path.read_text(errors="replace")
        except OSError:
            content = ""
        if text in content:
            return time.monotonic() - t0
        if fail_text and fail_text in content:
            raise AssertionError(f"{fail_text!r} in {path} before {text!r}:\n{content[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"{text!r} did not appear in {path} within {timeout:.0f} s")
