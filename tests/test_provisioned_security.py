"""Issue 37: the shipped provisioning, tried as a security reviewer would, on a rehearsed deployment of three
organisations (a bank runs the coordinator and holds the labels, an insurer and a telco each run a site).

One deployment serves every test of this module: provisioning/project.yml on localhost, plus an analyst at
the insurer (a `lead` of an organisation the sites do not accept jobs from) and a third, connected site that
no job names (issue 38: it never receives one). The bank lets its own analyst
bring code to its own server (`local/authorization.json`, its choice); the sites keep the shipped `byoc:
none`. Every row of ROLE_TABLE (provisioning/README.md prints the same table) is tried, allowed and
refused; then the review's attack, a code-bearing job deployed only to the telco; a job of an organisation
the sites do not accept; a site's admin aborting a running job; a defense a site enforces; the job store;
a foreign CA.
"""

from __future__ import annotations

import json
import shutil
import stat
import time
from pathlib import Path

import pytest
import yaml
from deployment_helpers import (
    PROVISIONING,
    REPO,
    free_port,
    localhost_project,
    provision,
    run_bounded,
    running_kits,
    wait_for_clients,
)
from nvflare.fuel.flare_api.api_spec import AuthorizationError
from scoring_helpers import score_the_test_rows
from submit_job import submit_and_collect, submit_copy

from vflflare.flare.site_config import write_site_config

pytestmark = pytest.mark.simulator

BANK_ADMIN, ANALYST = "admin@bank.example.com", "analyst@bank.example.com"
TELCO_IT, INSURER_IT, AUDITOR = "it@telco.example.com", "it@insurer.example.com", "auditor@insurer.example.com"
INSURER_ANALYST = "analyst@insurer.example.com"  # added to the rehearsed copy: a lead of a non-accepted org
INTRUDER = "site-intruder"  # added too: a connected site of the project that the jobs do not name
JOB = REPO / "jobs" / "oneshot_vfl"
ENFORCED_NOISE = 0.5


class Deployment:
    def __init__(self, prod: Path, server: str, sites: list[str], tmp: Path, procs) -> None:
        self.prod, self.server, self.sites, self.tmp, self.procs = prod, server, sites, tmp, procs
        self._sessions: dict = {}
        self.finished_job: str | None = None

    def session(self, user: str):
        if user not in self._sessions:
            self._sessions[user] = wait_for_clients(self.prod / user, user, self.sites, 60, self.procs)
        return self._sessions[user]

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("security")
    fl_port, admin_port = free_port(), free_port()
    while admin_port == fl_port:
        admin_port = free_port()
    project = localhost_project(PROVISIONING / "project.yml", tmp / "project.yml", fl_port, admin_port)
    project["participants"].append({"name": INSURER_ANALYST, "type": "admin", "org": "insurer", "role": "lead"})
    project["participants"].append(
        {"name": INTRUDER, "type": "client", "org": "intruder", "accept_jobs_from": ["bank"]}
    )
    (tmp / "project.yml").write_text(yaml.safe_dump(project, sort_keys=False))
    prov = tmp / "prov"
    prod = provision(tmp / "project.yml", prov, tmp / "provision.log")
    server = next(p["name"] for p in project["participants"] if p["type"] == "server")
    sites = sorted(p["name"] for p in project["participants"] if p["type"] == "client" and p["name"] != INTRUDER)

    # the bank's own rule for its own server: its analyst may bring code there; nobody else, nowhere else
    policy = json.loads((prod / server / "local" / "authorization.json.default").read_text())
    policy["permissions"]["lead"]["byoc"] = "o:bank"
    (prod / server / "local" / "authorization.json").write_text(json.dumps(policy, indent=2))

    data = tmp / "split"
    split = run_bounded(
        [
            __import__("sys").executable,
            "-m",
            "vflflare.cli",
            "split",
            "--dataset",
            "breast_cancer",
            "--sites",
            ",".join(sites),
            "--overlap",
            "120",
            "--seed",
            "3",
            "--out",
            str(data),
        ],
        120,
        tmp / "none",
        tmp / "split.log",
    )
    assert split.returncode == 0, split.output
    for kit in [prod / server, *(prod / s for s in [*sites, INTRUDER])]:
        write_site_config(kit, data)
    shutil.copytree(data / sites[0], data / INTRUDER)  # it has a table too
    score_the_test_rows(data, sites)  # new rows, for the scoring command a training run prints
    # the telco requires representation noise whatever a job asks (its local vflflare config)
    telco_config = prod / "site-telco" / "local" / "vflflare.json"
    telco_config.write_text(
        json.dumps({**json.loads(telco_config.read_text()), "enforce": {"representation_noise": ENFORCED_NOISE}})
    )

    with running_kits([prod / server, *(prod / s for s in [*sites, INTRUDER])], prov, tmp) as procs:
        found = Deployment(prod, server, sites, tmp, procs)
        wait_for_clients(prod / ANALYST, ANALYST, [*sites, INTRUDER], 180, procs).close()
        found.session(ANALYST)
        try:
            yield found
        finally:
            found.close()


def _refused(error: Exception | str) -> bool:
    return isinstance(error, AuthorizationError) or "not authorized" in str(error).lower()


def _outcome(action) -> str:
    """'allowed' or 'refused': a refusal is NVFlare's authorization error, raised or in a site's reply."""
    try:
        reply = action()
    except Exception as error:  # noqa: BLE001 - anything else (a finished job, a missing file) passed authorization
        return "refused" if _refused(error) else "allowed"
    return "refused" if _refused(reply) else "allowed"


def _finished_job(d: Deployment) -> str:
    """A completed vflflare job of the analyst's (submitted once per module)."""
    if d.finished_job is None:
        outcome = submit_and_collect(
            d.prod / ANALYST, JOB, d.tmp / "results", ANALYST, timeout=300, connect_timeout=30, sites=d.sites
        )
        assert outcome["status"] == "FINISHED:COMPLETED" and "error" not in (outcome["results"] or {"error": 1}), (
            outcome
        )
        d.finished_job = outcome["job_id"]
        d.finished_results = outcome["results"]
    return d.finished_job


ACTIONS = {
    "submit a vflflare job": lambda d, s: submit_copy(s, JOB, d.sites),
    "list jobs": lambda d, s: s.list_jobs(),
    "download the analyst's job": lambda d, s: s.download_job_result(_finished_job(d), str(d.tmp / "dl" / s.username)),
    "read the analyst's job's server log": lambda d, s: s.get_job_logs(_finished_job(d), target="server"),
    "abort the analyst's job": lambda d, s: s.abort_job(_finished_job(d)),
    "delete the analyst's job": lambda d, s: s.delete_job(_finished_job(d)),
    "ls on the server": lambda d, s: s.ls_target("server"),
    "ls on site-telco": lambda d, s: s.ls_target("site-telco"),
    "cat site-telco's local/vflflare.json": lambda d, s: s.cat_target("site-telco", file="local/vflflare.json"),
    "sys_info of site-telco": lambda d, s: s.do_command("sys_info client site-telco"),
    "cat the analyst's job's log on site-telco": lambda d, s: s.cat_target(
        "site-telco", file=f"{_finished_job(d)}/log.txt"
    ),
}

# (user, action, outcome): the shipped policy, row by row (provisioning/README.md, "Who may do what")
ROLE_TABLE = [
    (BANK_ADMIN, "submit a vflflare job", "refused"),
    (BANK_ADMIN, "list jobs", "allowed"),
    (BANK_ADMIN, "download the analyst's job", "allowed"),
    (BANK_ADMIN, "read the analyst's job's server log", "allowed"),
    (BANK_ADMIN, "ls on the server", "allowed"),
    (BANK_ADMIN, "ls on site-telco", "refused"),
    (BANK_ADMIN, "cat site-telco's local/vflflare.json", "refused"),
    (BANK_ADMIN, "sys_info of site-telco", "refused"),
    (ANALYST, "list jobs", "allowed"),
    (ANALYST, "download the analyst's job", "allowed"),
    (ANALYST, "read the analyst's job's server log", "allowed"),
    (ANALYST, "ls on the server", "refused"),
    (ANALYST, "ls on site-telco", "refused"),
    (ANALYST, "sys_info of site-telco", "refused"),
    (TELCO_IT, "submit a vflflare job", "refused"),
    (TELCO_IT, "list jobs", "allowed"),
    (TELCO_IT, "download the analyst's job", "allowed"),
    (TELCO_IT, "read the analyst's job's server log", "allowed"),
    (TELCO_IT, "abort the analyst's job", "allowed"),
    (TELCO_IT, "delete the analyst's job", "refused"),
    (TELCO_IT, "ls on the server", "refused"),
    (TELCO_IT, "ls on site-telco", "allowed"),
    (TELCO_IT, "cat site-telco's local/vflflare.json", "allowed"),
    (TELCO_IT, "sys_info of site-telco", "allowed"),
    (TELCO_IT, "cat the analyst's job's log on site-telco", "allowed"),
    (BANK_ADMIN, "cat the analyst's job's log on site-telco", "refused"),
    (INSURER_IT, "cat the analyst's job's log on site-telco", "refused"),
    (INSURER_IT, "ls on site-telco", "refused"),
    (INSURER_IT, "cat site-telco's local/vflflare.json", "refused"),
    (INSURER_IT, "sys_info of site-telco", "refused"),
    (AUDITOR, "submit a vflflare job", "refused"),
    (AUDITOR, "list jobs", "allowed"),
    (AUDITOR, "download the analyst's job", "refused"),
    (AUDITOR, "read the analyst's job's server log", "refused"),
    (AUDITOR, "abort the analyst's job", "refused"),
    (AUDITOR, "ls on site-telco", "refused"),
    (ANALYST, "delete the analyst's job", "allowed"),  # last: the job is gone afterwards
]


def test_every_row_of_the_role_table(deployment):
    # what the telco's admin may read is its site's own log of the job (before the table deletes the job)
    log = ACTIONS["cat the analyst's job's log on site-telco"](deployment, deployment.session(TELCO_IT))
    assert "data root:" in str(log) and "vflflare code:" in str(log), str(log)[:2000]
    # a connected site of the project that the job does not name never received it (issue 38)
    assert (deployment.prod / "site-telco" / deployment.finished_job).is_dir()
    assert not (deployment.prod / INTRUDER / deployment.finished_job).exists()
    got = [
        (user, action, _outcome(lambda: ACTIONS[action](deployment, deployment.session(user))))  # noqa: B023
        for user, action, _ in ROLE_TABLE
    ]
    wrong = [(row, outcome) for row, (_, _, outcome) in zip(ROLE_TABLE, got) if row[2] != outcome]
    assert not wrong, "\n".join(
        f"{user}: {action}: expected {want}, got {outcome}" for (user, action, want), outcome in wrong
    )
    # the job ran on the installed vflflare, without code, and the telco's own rule was applied and recorded
    results = deployment.finished_results
    assert results["metrics"]["test_auc"] > 0.9
    enforced = results["privacy"]["enforced"]["site-telco"]["representation_noise"]
    assert enforced["enforced"] == ENFORCED_NOISE and "site-telco" in enforced["by"]
    assert "site-insurer" not in results["privacy"]["enforced"]
    assert results["sites"] == deployment.sites


def test_the_printed_scoring_command_runs_as_is_on_the_deployment(deployment, tmp_path):
    """Issue 38: after a provisioned training run, the scoring command in its results table pastes and runs
    (job.py --env prod with the analyst's kit and the job's sites)."""
    import shlex
    import subprocess

    from vflflare.results import format_table

    _finished_job(deployment)
    hint = [
        line for line in format_table(deployment.finished_results).splitlines() if line.startswith("score new rows")
    ]
    assert len(hint) == 1, format_table(deployment.finished_results)
    command = shlex.split(hint[0].split(": ", 1)[1])
    assert command[command.index("--env") + 1] == "prod" and "--startup-kit" in command, command
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    model = deployment.finished_results["model_id"]
    predictions = deployment.tmp / "split" / "vflflare_predictions" / f"predictions_{model}.csv"
    assert predictions.is_file(), run.stdout[-3000:]


def _code_job(folder: Path, sites: list[str]) -> Path:
    """The review's attack: custom code that reads a site's data and key and returns them to the submitter."""
    code = """
import os, subprocess
from nvflare.apis.executor import Executor
from nvflare.apis.impl.controller import Controller, Task
from nvflare.apis.shareable import Shareable

class Steal(Executor):
    def execute(self, task_name, shareable, fl_ctx, abort_signal):
        out = Shareable()
        out["loot"] = {"ls": os.listdir("."), "key": open("startup/client.key").readline(),
                       "id": subprocess.run(["id"], capture_output=True, text=True).stdout}
        return out

class Collect(Controller):
    def start_controller(self, fl_ctx): pass
    def stop_controller(self, fl_ctx): pass
    def process_result_of_unknown_task(self, client, task_name, client_task_id, result, fl_ctx): pass
    def control_flow(self, abort_signal, fl_ctx):
        task = Task("steal", Shareable(), timeout=60)
        self.broadcast_and_wait(task, fl_ctx, min_responses=1, abort_signal=abort_signal)
        with open("loot.txt", "w") as f:
            f.write(repr([t.result.get("loot") for t in task.client_tasks if t.result]))
"""
    job = folder / "exfil"
    for app, config, body in [
        (
            "app_server",
            "config_fed_server.json",
            {
                "format_version": 2,
                "workflows": [{"id": "collect", "path": "exfil.Collect", "args": {}}],
                "components": [],
            },
        ),
        (
            "app_sites",
            "config_fed_client.json",
            {
                "format_version": 2,
                "executors": [{"tasks": ["steal"], "executor": {"path": "exfil.Steal", "args": {}}}],
                "components": [],
            },
        ),
    ]:
        (job / app / "config").mkdir(parents=True)
        (job / app / "custom").mkdir()
        (job / app / "config" / config).write_text(json.dumps(body))
        (job / app / "custom" / "exfil.py").write_text(code)
    (job / "meta.json").write_text(
        json.dumps(
            {"name": "exfil", "min_clients": len(sites), "deploy_map": {"app_server": ["server"], "app_sites": sites}}
        )
    )
    return job


def _wait_for_status(session, job_id: str, done: tuple[str, ...], timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = session.get_job_meta(job_id)
        if str(meta.get("status")).startswith(done):
            return meta
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not reach {done} in {timeout:.0f} s: {meta}")


def test_a_job_that_brings_code_is_refused_by_the_site(deployment):
    d = deployment
    analyst = d.session(ANALYST)
    # the bank's server accepts its analyst's code (its own rule); the telco's site does not
    job_id = submit_copy(analyst, _code_job(d.tmp / "attack", ["site-telco"]))
    meta = _wait_for_status(analyst, job_id, ("FAILED", "FINISHED"))
    detail = "\n".join(meta.get("job_deploy_detail", []))
    assert meta["status"] == "FINISHED:FAILED_TO_RUN", meta
    assert "site-telco: NVFLARE_ERROR: BYOC not permitted" in detail, detail
    loot = d.prod / d.server / job_id / "loot.txt"
    assert not loot.exists()
    # the shipped rule on the server too: an analyst of another organisation may not bring code at all
    insurer_analyst = d.session(INSURER_ANALYST)
    job_id = submit_copy(insurer_analyst, _code_job(d.tmp / "attack2", d.sites))
    meta = _wait_for_status(insurer_analyst, job_id, ("FAILED", "FINISHED"))
    assert meta["status"] == "FINISHED:FAILED_TO_RUN", meta
    assert "server: BYOC not permitted" in "\n".join(meta.get("job_deploy_detail", [])), meta


def test_sites_accept_jobs_only_from_the_organisations_they_name(deployment):
    insurer_analyst = deployment.session(INSURER_ANALYST)
    job_id = submit_copy(insurer_analyst, JOB, deployment.sites)  # the server accepts any organisation's lead ...
    meta = _wait_for_status(insurer_analyst, job_id, ("FAILED", "FINISHED"))
    detail = "\n".join(meta.get("job_deploy_detail", []))
    assert meta["status"] == "FINISHED:FAILED_TO_RUN", meta  # ... but every site accepts the bank's only
    for site in deployment.sites:
        assert f"{site}: " in detail and "not authorized for 'submit_job'" in detail, detail


def test_a_sites_admin_aborts_a_running_job(deployment, tmp_path):
    from vflflare.recipes import VFLRecipe

    VFLRecipe(algorithm="oneshot", config={"ssl_epochs": 5000}, name="long_oneshot", sites=deployment.sites).export(
        str(tmp_path)
    )
    analyst, telco = deployment.session(ANALYST), deployment.session(TELCO_IT)
    job_id = submit_copy(analyst, tmp_path / "long_oneshot")
    _wait_for_status(analyst, job_id, ("RUNNING",))
    telco.abort_job(job_id)
    meta = _wait_for_status(analyst, job_id, ("FINISHED",), timeout=90)
    assert meta["status"] == "FINISHED:ABORTED", meta


def test_the_job_store_is_private_to_the_server(deployment):
    d = deployment
    job_id = _finished_job(d) if d.finished_job is None else d.finished_job
    workspace = d.prod / d.server
    store = workspace / "jobs-storage"
    resources = json.loads((workspace / "local" / "resources.json").read_text())
    manager = next(c for c in resources["components"] if c["id"] == "job_manager")
    assert manager["args"]["uri_root"] == str(store.resolve())
    assert resources["snapshot_persistor"]["args"]["storage"]["args"]["root_dir"] == str(
        (workspace / "snapshot-storage").resolve()
    )
    assert sorted(p.name for p in store.iterdir())  # the module's jobs are here
    for path in [store, workspace / "snapshot-storage", *store.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}: readable by others"
    shared = Path("/tmp/nvflare/jobs-storage")
    assert not (shared / job_id).exists()


def test_a_foreign_cas_admin_is_refused(deployment, tmp_path):
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    # the same project, names and ports, provisioned again: a different root CA
    foreign = provision(deployment.tmp / "project.yml", tmp_path / "foreign", tmp_path / "foreign.log")
    with pytest.raises(Exception):
        session = new_secure_session(ANALYST, str(foreign / ANALYST), timeout=15)
        session.close()
