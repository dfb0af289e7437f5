"""What the suites that run a real POC share: the repository's poc/run.sh, and `PocRun`, one NVFlare POC on
this machine step by step (poc/run.sh runs one job with it; the collab_vs_aux suite starts one POC per K and
submits every job to it in turn).

PocRun's steps (poc/poc_run.py's docstring says what each does): sites, stage, prepare, configure_data,
configure_link, configure_adhoc, start, submit_and_wait, collect, stop. Its `args` are poc/run.sh's options
(argparse.Namespace or any object with the same attributes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vflflare.flare.provisioning import enable_adhoc_connections
from vflflare.flare.site_config import SITE_CONFIG_FILE, write_site_config
from vflflare.poc.processes import free_port, port_is_free, stop_processes
from vflflare.poc.wan_link import WanLink
from vflflare.results import RESULTS_FILE

POC_RUN = Path(__file__).resolve().parents[3] / "poc" / "run.sh"  # the checkout this package runs from
DEFAULT_PORT = 8002  # NVFlare's; 2.9 serves admin and FL on the same port
SERVER = "server"
COMPLETED = "FINISHED:COMPLETED"


STATUS_EVERY = 10  # seconds between the status lines printed while the job runs


def link_impairment(args: Any) -> dict[str, Any]:
    """The link's jitter and loss options (poc/run.sh --link-jitter-ms ...; absent: off) as WanLink's arguments."""
    return {
        "jitter_ms": getattr(args, "link_jitter_ms", None) or 0.0,
        "jitter": getattr(args, "link_jitter", None) or "uniform",
        "loss": getattr(args, "link_loss", None) or 0.0,
        "loss_penalty_ms": getattr(args, "link_loss_penalty_ms", None),
    }


class SetupError(RuntimeError):
    """The POC could not be prepared or started (exit status 2)."""


class PocRun:
    def __init__(self, args: Any) -> None:
        self.args = args
        self.job = Path(args.job).resolve()
        self.work = Path(args.workspace).resolve()
        self.poc = self.work / "poc"
        self.results_root = self.work / "results"
        self.env = dict(os.environ)
        self.env["NVFLARE_POC_WORKSPACE"] = str(self.poc)
        # the nvflare CLI keeps its state (active startup kit, POC location) in ~/.nvflare: a private
        # home keeps this run from changing the user's and from seeing another run's
        self.env["HOME"] = str(self.work / "home")
        # sites find data through their local/vflflare.json only, never through the caller's env
        self.env.pop("VFLFLARE_DATA_ROOT", None)
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.prod: Path | None = None
        self.port = 0
        self.link: WanLink | None = None
        self.started = False
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ helpers
    def log(self, message: str) -> None:
        print(f"[poc {time.monotonic() - self.t0:6.1f} s] {message}", flush=True)

    def nvflare(
        self, *args: str, timeout: float, json_out: bool = False, check: bool = True, new_session: bool = False
    ) -> dict | str:
        """Run the nvflare CLI of this interpreter's environment; return its JSON data or text."""
        cmd = [sys.executable, "-m", "nvflare.cli"] + (["--format", "json"] if json_out else []) + list(args)
        try:
            proc = subprocess.run(
                cmd,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                start_new_session=new_session,
            )
        except subprocess.TimeoutExpired as error:
            raise SetupError(f"`nvflare {' '.join(args)}` did not finish in {timeout:.0f} s") from error
        if not json_out:
            if check and proc.returncode != 0:
                raise SetupError(f"`nvflare {' '.join(args)}` failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
            return proc.stdout + proc.stderr
        try:
            reply = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            reply = {"status": "error", "detail": (proc.stdout + proc.stderr).strip()[-2000:]}
        if check and (proc.returncode != 0 or reply.get("status") != "ok"):
            raise SetupError(
                f"`nvflare {' '.join(args)}` failed ({proc.returncode}): {json.dumps(reply)[:2000]}\n"
                f"{proc.stderr.strip()[-2000:]}"
            )
        return reply

    # ------------------------------------------------------------------ steps
    def sites(self) -> list[str]:
        from vflflare.jobs import expected_sites
        from vflflare.protocol.topology import check_data_sites, site_folders

        needed, names = expected_sites(self.job)  # the job's own count: meta.json always asks NVFlare for 2
        # each party sees only its own folder of --data-root (configure_data), so the coordinator cannot
        # tell that a site of the data has no POC site: default to the data's sites, and check here
        split = site_folders(self.args.data_root) if self.args.data_root else []
        given = self.args.sites
        if isinstance(given, list):  # --sites broker,insurer: the user's names
            sites = given
        elif given is not None:  # --sites K
            sites = [f"site-{i + 1}" for i in range(given)]
        elif names:  # the job names its sites
            sites = names
        elif len(split) >= needed:
            sites = split  # the data's own site names
        else:
            sites = [f"site-{i + 1}" for i in range(max(needed, len(split)))]
        if len(sites) < needed:
            raise SetupError(f"{self.job.name} needs at least {needed} sites (its min_sites), got {sites}")
        if names and sorted(names) != sorted(sites):
            raise SetupError(f"{self.job.name} names its sites {names}; this POC runs {sites}")
        if self.args.data_root:
            try:
                check_data_sites("--data-root", self.args.data_root, sites)
            except ValueError as error:
                raise SetupError(str(error)) from error
        return sites

    def stage(self) -> Path:
        from vflflare.staging import stage_job

        staged = stage_job(self.job, self.work / "staged")
        self.log(f"staged {self.job} -> {staged} (vflflare copied into app/custom)")
        return staged

    def prepare(self, sites: list[str]) -> None:
        import yaml

        port = self.args.port
        if port is None:
            port = DEFAULT_PORT if port_is_free(DEFAULT_PORT) else free_port()
        elif not port_is_free(port):
            raise SetupError(f"port {port} is in use on localhost; pick another with --port")
        args = ["poc", "prepare", "-c", *sites, "--force"] + (["-he"] if self.args.he else [])
        self.nvflare(*args, timeout=180)
        project_file = self.poc / "project.yml"
        project = yaml.safe_load(project_file.read_text())
        server = next(p for p in project["participants"] if p["type"] == "server")
        if int(server.get("fed_learn_port", DEFAULT_PORT)) != port:
            server["fed_learn_port"] = server["admin_port"] = port
            patched = self.work / "project.yml"  # outside the POC workspace, which prepare re-creates
            patched.write_text(yaml.safe_dump(project, sort_keys=False))
            self.nvflare("poc", "prepare", "-i", str(patched), "--force", timeout=180)
        self.prod = self.poc / project["name"] / "prod_00"
        self.port = port
        he = "with HE contexts " if self.args.he else ""
        self.log(f"POC workspace {he}for {', '.join(sites)} at {self.poc} (port {port})")

    def configure_data(self, parties: list[str]) -> None:
        root = self.args.data_root
        if not root:
            self.log("no --data-root: every party uses the embedded default table")
            return
        root = Path(root).resolve()
        if not root.is_dir():
            raise SetupError(f"--data-root {root} is not a folder")
        for party in parties:
            own = root / party
            if own.is_dir():  # a location holding this party's folder and nothing else
                data_root = self.work / "site_data" / party
                data_root.mkdir(parents=True, exist_ok=True)
                link = data_root / party
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(own, target_is_directory=True)
            else:  # the job reports the missing folder, listing what --data-root has
                data_root = root
            write_site_config(self.prod / party, data_root)
        self.log(f"data: each party's local/{SITE_CONFIG_FILE} names its own folder of {root}")

    def configure_link(self, sites: list[str]) -> None:
        """The sites' startup kits dial the emulated link instead of the server: each site its own port of the
        relay, so all of a site's connections share the site's bandwidth."""
        if self.args.link_rtt_ms is None and self.args.link_mbit is None:
            return
        self.link = WanLink(
            self.port, self.args.link_rtt_ms or 0.0, self.args.link_mbit, sites=sites, **link_impairment(self.args)
        )
        self.link.start()
        for site in sites:
            path = self.prod / site / "startup" / "fed_client.json"
            config = json.loads(path.read_text())
            for server in config["servers"]:
                server["service"]["target"] = f"localhost:{self.link.ports[site]}"
            path.write_text(json.dumps(config, indent=2))
        speed = f"{self.args.link_mbit:g} Mbit/s per site" if self.args.link_mbit else "unlimited bandwidth"
        impairment = self.link.impairment
        extra = "".join(
            [
                f", jitter {impairment.jitter_ms:g} ms ({impairment.jitter})" if impairment.jitter_ms else "",
                f", loss {impairment.loss:g} per segment (+{impairment.penalty_s * 1000:g} ms)"
                if impairment.loss
                else "",
            ]
        )
        self.log(
            f"link: the sites reach the server through an emulated link, round trip "
            f"{self.args.link_rtt_ms or 0:g} ms, {speed}{extra} (ports {self.link.ports}); no ad-hoc connections"
        )

    def configure_adhoc(self) -> None:
        """The server's local/comm_config.json: its job cells listen for the sites' job cells directly."""
        if self.args.adhoc and self.link is None:
            enable_adhoc_connections(self.prod / SERVER / "local", "localhost")
            self.log("ad-hoc connections: site job cells connect straight to the server's job cell (stcp, mutual TLS)")

    def start(self, sites: list[str]) -> None:
        self.started = True
        self.nvflare("poc", "start", "--no-wait", timeout=120, new_session=True)
        # Our own wait, each check a bounded process: `poc start`'s built-in wait once hung past its
        # --timeout in an admin session that never answered, and a fresh session then succeeds.
        kit, deadline, registered = str(self.admin_kit()), time.monotonic() + self.args.start_timeout, set()
        while not set(sites) <= registered:
            if time.monotonic() > deadline:
                raise SetupError(
                    f"the POC's sites did not all connect in {self.args.start_timeout} s: connected "
                    f"{sorted(registered) or 'none'} of {sites}; see {self.prod}/*/log.txt"
                )
            time.sleep(2)
            try:
                reply = self.nvflare(
                    "system", "status", "server", "--startup-kit", kit, timeout=60, json_out=True, check=False
                )
            except SetupError:
                continue
            registered = {c.get("client_name") for c in (reply.get("data") or {}).get("clients") or []}
        self.log(f"POC started: server and {len(sites)} sites connected")

    def admin_kit(self) -> Path:
        import yaml

        project = yaml.safe_load((self.poc / "project.yml").read_text())
        admin = next(
            p["name"] for p in project["participants"] if p["type"] == "admin" and p.get("role") == "project_admin"
        )
        return self.prod / admin

    def submit_and_wait(self, staged: Path) -> tuple[str, str]:
        kit = str(self.admin_kit())
        reply = self.nvflare("job", "submit", "-j", str(staged), "--startup-kit", kit, timeout=180, json_out=True)
        job_id = reply["data"]["job_id"]
        self.log(f"submitted {staged.name} as job {job_id}")
        started = time.monotonic()
        while True:  # a status line every STATUS_EVERY s while the job runs
            left = self.args.timeout - (time.monotonic() - started)
            reply = self.nvflare(
                "job",
                "wait",
                job_id,
                "--timeout",
                str(max(1, int(min(STATUS_EVERY, left)))),
                "--interval",
                "2",
                "--startup-kit",
                kit,
                timeout=STATUS_EVERY + 120,
                json_out=True,
                check=False,
            )
            status = (reply.get("data") or {}).get("status")
            if status or left <= STATUS_EVERY or "TIMEOUT" not in json.dumps(reply):  # done, out of time, or an error
                break
            self.log(f"job {job_id}: running, {time.monotonic() - started:.0f} s")
        status = status or f"not finished ({reply.get('detail') or reply.get('message') or reply})"
        self.log(f"job {job_id}: {status}")
        if status.startswith("not finished"):
            self.nvflare("job", "abort", job_id, "--startup-kit", kit, timeout=120, json_out=True, check=False)
        return job_id, status

    def collect(self, job_id: str) -> Path | None:
        """The server's job workspace (downloaded) and each site's job folder, under results/<job id>/."""
        out = self.results_root / job_id
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        download = self.work / "download"
        shutil.rmtree(download, ignore_errors=True)
        reply = self.nvflare(
            "job",
            "download",
            job_id,
            "-o",
            str(download),
            "--force",
            "--startup-kit",
            str(self.admin_kit()),
            timeout=300,
            json_out=True,
            check=False,
        )
        path = (reply.get("data") or {}).get("path")
        if path and (Path(path) / "workspace").is_dir():
            shutil.move(str(Path(path) / "workspace"), str(out / SERVER))
        else:
            self.log(f"could not download the server's job workspace: {json.dumps(reply)[:1000]}")
        shutil.rmtree(download, ignore_errors=True)
        for site_dir in sorted(p for p in self.prod.iterdir() if (p / job_id).is_dir()):
            shutil.copytree(
                site_dir / job_id,
                out / site_dir.name,
                ignore=shutil.ignore_patterns("custom", "__pycache__"),
                dirs_exist_ok=True,
            )
        results = out / SERVER / RESULTS_FILE
        self.log(f"results collected under {out}")
        return results if results.is_file() else None

    def stop(self) -> None:
        if self.started:
            try:
                self.nvflare("poc", "stop", timeout=self.args.stop_timeout)
                self.log("POC stopped")
            except SetupError as error:
                self.log(f"`nvflare poc stop` did not finish cleanly: {error}")
        if self.link is not None:
            self.link.stop()
            stats = self.link.summary()
            (self.results_root / "link.json").parent.mkdir(parents=True, exist_ok=True)
            (self.results_root / "link.json").write_text(json.dumps(stats) + "\n")
            self.log(
                f"link: {stats['up_bytes']} bytes up, {stats['down_bytes']} down, {stats['connections']} connections"
            )
        left = stop_processes(marker=f"{self.poc}{os.sep}", descendants=True)
        if left:
            self.log(f"stopped {len(left)} leftover process(es): {left}")
        if self.started and not self.args.keep and self.poc.exists():
            try:
                self.nvflare("poc", "clean", timeout=60)
            except SetupError:
                shutil.rmtree(self.poc, ignore_errors=True)
            self.log(f"POC workspace {self.poc} removed (results stay in {self.results_root})")

    def run(self) -> int:
        sites = self.sites()
        staged = self.stage()
        self.prepare(sites)
        self.configure_data([SERVER] + sites)
        self.configure_link(sites)
        self.configure_adhoc()
        self.start(sites)
        job_id, status = self.submit_and_wait(staged)
        results_path = self.collect(job_id)
        if results_path is None:
            print(
                f"FAILED: job {job_id} ({status}) left no {RESULTS_FILE}; logs: {self.results_root / job_id}",
                file=sys.stderr,
            )
            return 1
        results = json.loads(results_path.read_text())
        if self.args.data_root:  # where the printed scoring command runs (results.scoring_command)
            results.setdefault("environment", {"kind": "poc", "data_root": str(Path(self.args.data_root).resolve())})
        from vflflare.results import format_table

        print(format_table(results))  # a failed job's ends with what failed and what to do
        print(f"job {job_id}: {status}")
        print(f"results: {results_path}")
        return 1 if "error" in results or status != COMPLETED else 0
