"""Provisioned deployment on localhost: provision/project.yml is provisioned into a temporary folder,
the server and the sites start from their own startup kits (mutual TLS, signed kits), each
organisation's site reads its own data location and runs the vflflare it installed, and the job
submitter (role lead) submits a job without code with the admin API, waits for it and downloads the
results; then the same job as a recipe through NVFlare's ProdEnv. What each role may and may not do is
tests/test_provisioned_security.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
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
from nvflare.recipe import ProdEnv
from scoring_helpers import score_the_test_rows
from submit_job import submit_and_collect, submit_copy

from vflflare.flare.provisioning import enable_adhoc_connections
from vflflare.flare.site_config import write_site_config
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.model_ids import MANIFEST
from vflflare.protocol.model_store import LABEL_DIR, models_dir, read_predictions
from vflflare.recipes import VFLRecipe
from vflflare.registry import make_config
from vflflare.simulation import find_results

JOB = REPO / "jobs" / "oneshot_vfl"
CONFIG = next(
    w
    for w in json.loads((JOB / "app" / "config" / "config_fed_server.json").read_text())["workflows"]
    if w["path"].endswith("VFLController")
)["args"]["config"]


def _participants(project: dict, kind: str) -> list[dict]:
    return [p for p in project["participants"] if p["type"] == kind]


def test_project_yml_is_a_realistic_multi_org_project():
    import yaml

    project = yaml.safe_load((PROVISIONING / "project.yml").read_text())
    (server,) = _participants(project, "server")
    sites = _participants(project, "client")
    admins = _participants(project, "admin")
    assert len(sites) >= 2 and len({s["org"] for s in sites}) == len(sites)
    assert server["org"] not in {s["org"] for s in sites}
    assert {a["role"] for a in admins} >= {"project_admin", "lead", "org_admin"}
    builders = [b["path"] for b in project["builders"]]
    assert builders.index("nvflare.lighter.impl.he.HEBuilder") < builders.index(
        "nvflare.lighter.impl.signature.SignatureBuilder"
    )
    authz = next(b for b in project["builders"] if b["path"].endswith("AuthorizationPolicyBuilder"))
    permissions = authz["args"]["permissions"]
    assert permissions["lead"]["submit_job"] == "any"
    assert all(rights == {"view": "any"} or rights["byoc"] == "none" for rights in permissions.values())
    assert all(site.get("accept_jobs_from") == [server["org"]] for site in sites)


def test_adhoc_settings_keep_what_the_servers_comm_config_already_holds(tmp_path):
    internal = {"scheme": "tcp", "resources": {"host": "localhost", "port": 8010}}
    (tmp_path / "comm_config.json").write_text(json.dumps({"allow_adhoc_conns": False, "internal": internal}))
    enable_adhoc_connections(tmp_path, "fl.example.org", "8102-8120")
    assert json.loads((tmp_path / "comm_config.json").read_text()) == {
        "allow_adhoc_conns": True,
        "internal": internal,
        "adhoc": {"scheme": "stcp", "resources": {"host": "fl.example.org", "ports": "8102-8120"}},
    }


@pytest.mark.simulator
def test_provisioned_system_runs_a_job_end_to_end(tmp_path):
    fl_port = free_port()
    admin_port = free_port()
    while admin_port == fl_port:
        admin_port = free_port()
    project = localhost_project(PROVISIONING / "project.yml", tmp_path / "project.yml", fl_port, admin_port)
    prov = tmp_path / "prov"
    prod = provision(tmp_path / "project.yml", prov, tmp_path / "provision.log")

    (server,) = _participants(project, "server")
    sites = sorted(p["name"] for p in _participants(project, "client"))
    submitter = next(p["name"] for p in _participants(project, "admin") if p["role"] == "lead")
    server_kit, site_kits, admin_kit = prod / server["name"], [prod / s for s in sites], prod / submitter

    # what each organisation receives: TLS on, HE contexts, a policy in which nobody brings code, and
    # vflflare's components on NVFlare's allow list
    assert (
        json.loads((server_kit / "startup" / "fed_server.json").read_text())["servers"][0]["connection_security"]
        == "mtls"
    )
    assert (server_kit / "startup" / "server_context.tenseal").is_file()
    adhoc = json.loads((server_kit / "local" / "comm_config.json").read_text())
    assert adhoc["allow_adhoc_conns"] and adhoc["adhoc"] == {
        "scheme": "stcp",
        "resources": {"host": "localhost", "ports": "8102-8120"},
    }
    for kit in [server_kit, *site_kits]:
        policy = json.loads((kit / "local" / "authorization.json.default").read_text())["permissions"]
        assert policy["lead"]["byoc"] == "none" and policy["org_admin"]["byoc"] == "none"
        assert policy["lead"]["submit_job"] == ("any" if kit == server_kit else [f"o:{server['org']}"])
        resources = json.loads((kit / "local" / "resources.json.default").read_text())
        assert "vflflare.flare." in resources["class_allow_list"]
    for kit in site_kits:
        assert (kit / "startup" / "client_context.tenseal").is_file()
        assert not (kit / "startup" / "server_context.tenseal").exists()
    # start.sh where python3 cannot import NVFlare: a message and exit 1, not a silent restart loop
    fake = tmp_path / "python_without_nvflare"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\nexit 1\n")
    (fake / "python3").chmod(0o755)
    for kit in (server_kit, site_kits[0]):
        start = subprocess.run(
            ["bash", str(kit / "startup" / "start.sh")],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
        )
        assert start.returncode == 1 and "cannot import nvflare and vflflare" in start.stderr, start

    # each organisation keeps its own table in its own place, named in its kit's local/vflflare.json
    data = tmp_path / "split"
    split = run_bounded(
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
            "100",
            "--seed",
            "2",
            "--out",
            str(data),
        ],
        120,
        tmp_path / "none",
        tmp_path / "split.log",
    )
    assert split.returncode == 0, split.output
    for kit, party in [(server_kit, "server")] + list(zip(site_kits, sites)):
        own_root = tmp_path / "orgs" / kit.name / "data"
        shutil.copytree(data / party, own_root / party)
        score_the_test_rows(own_root, [party] if party != "server" else [])  # new rows to score: the test rows
        write_site_config(kit, own_root)

    # each service runs the vflflare installed beside it: the job brings no code
    with running_kits([server_kit, *site_kits], prov, tmp_path) as procs:
        wait_for_clients(admin_kit, submitter, sites, 180, procs).close()
        # the policy is enforced: an org admin may not submit (nor bring code)
        org_admin = next(p["name"] for p in _participants(project, "admin") if p["role"] == "org_admin")
        with pytest.raises(AuthorizationError, match="not authorized for 'submit_job'"):
            submit_and_collect(
                prod / org_admin, JOB, tmp_path / "refused", org_admin, timeout=60, connect_timeout=30, sites=sites
            )
        outcome = submit_and_collect(
            admin_kit, JOB, tmp_path / "results", submitter, timeout=300, sites=sites, connect_timeout=30, log=print
        )
        job_id = outcome["job_id"]
        # the moment NVFlare says the job finished, every site's model is on disk (not at its END_RUN, later)
        model_id = (outcome["results"] or {}).get("model_id", "none")
        saved_at_finish = {
            s: (models_dir(tmp_path / "orgs" / kit.name / "data", model_id) / s / MANIFEST).is_file()
            for s, kit in zip(sites, site_kits)
        }
        site_logs = {s: (kit / job_id / "log.txt").read_text() for s, kit in zip(sites, site_kits)}
        # the recipe form of the same job, submitted through NVFlare's ProdEnv with the lead's kit
        recipe = VFLRecipe(algorithm="oneshot", sites=sites, config=CONFIG)
        run = recipe.execute(ProdEnv(startup_kit_location=str(admin_kit), username=submitter, login_timeout=30))
        downloaded = run.get_result(timeout=300, clean_up=False)
        recipe_results = json.loads(find_results(downloaded).read_text()) if downloaded else None
        # scoring with the latest model; nothing set anywhere: each party kept its model beside its data
        scoring = submit_and_collect(
            admin_kit,
            REPO / "jobs" / "vertical_inference",
            tmp_path / "scored",
            submitter,
            sites=sites,
            timeout=300,
            connect_timeout=30,
            log=print,
        )

    assert outcome["status"] == "FINISHED:COMPLETED", outcome
    assert saved_at_finish == dict.fromkeys(sites, True), saved_at_finish
    # the predictions reach the analyst through download_job: the label party ran at the server
    scored = scoring["results"]
    assert scoring["status"] == "FINISHED:COMPLETED" and "error" not in scored, scoring
    fetched = scoring["results_path"].parent / scored["training"]["predictions_in_job"]
    server_runs = tmp_path / "orgs" / server_kit.name / "data"
    expected = models_dir(server_runs, scored["training"]["model_job"]) / LABEL_DIR / "test_predictions.csv"
    assert read_predictions(fetched) == read_predictions(expected)
    results = outcome["results"]
    assert results is not None and "error" not in results, results
    assert results["sites"] == sites and results["label_owner"] == "server"
    for site, log in site_logs.items():
        assert f"data root: {tmp_path / 'orgs' / site / 'data'}" in log
        assert f"vflflare code: {REPO / 'custom' / 'vflflare'}" in log
        # the job process reached the server's job process directly, over TLS, on a port of the range
        port = re.search(r"created adhoc connector \S+ to stcp://localhost:(\d+) on server\.", log)
        assert port and 8102 <= int(port.group(1)) <= 8120, log[-3000:]

    # the same numbers as the reference run of the same phases without NVFlare
    reference = run_inprocess(make_config(CONFIG), sites, str(data))
    metric = next(k for k in reference["metrics"] if k.startswith("test_"))
    assert results["metrics"][metric] == pytest.approx(reference["metrics"][metric], abs=1e-6)
    assert recipe_results is not None and "error" not in recipe_results, recipe_results
    assert recipe_results["metrics"] == results["metrics"]
    assert recipe_results["communication"]["per_site"] == results["communication"]["per_site"]
    assert results["metrics"][metric] > 0.9
    for site in sites:
        got, want = results["communication"]["per_site"][site], reference["communication"]["per_site"][site]
        assert (got["uploads"], got["downloads"], got["payload_bytes"]) == (
            want["uploads"],
            want["downloads"],
            want["payload_bytes"],
        )
        assert (got["uploads"], got["downloads"]) == (2, 1)


def test_a_provisioned_job_names_its_sites(tmp_path):
    """Issue 38: no uninvited site. A job goes to a provisioned system only with its sites named: NVFlare then
    deploys it to them alone, and the coordinator refuses any other by name."""
    from vflflare.jobs import expected_sites, name_sites

    with pytest.raises(ValueError, match="names no sites: a provisioned job's parties are explicit"):
        submit_copy(None, JOB)
    job = shutil.copytree(JOB, tmp_path / JOB.name)
    name_sites(job, ["broker", "insurer"])
    assert expected_sites(job) == (2, ["broker", "insurer"])
    assert json.loads((job / "meta.json").read_text())["deploy_map"] == {"app": ["server", "broker", "insurer"]}
    with pytest.raises(ValueError, match=r"names its sites \['broker', 'insurer'\], not \['broker', 'intruder'\]"):
        name_sites(job, ["broker", "intruder"])
    with pytest.raises(ValueError, match="names its sites"):
        VFLRecipe(algorithm="oneshot").execute(ProdEnv(startup_kit_location=str(tmp_path), username="analyst"))
