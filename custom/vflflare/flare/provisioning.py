"""Provisioning helpers for a real vflflare deployment (used from provisioning/project.yml).

`AdhocConnectionsBuilder` lets each site's job process connect straight to the server's job process
(NVFlare's ad-hoc connections, over mutual TLS with the kits' certificates). A split-NN step then
takes two hops instead of four through the parent processes: about half the time
(benchmarks/SCALE_REPORT.md). The server must accept connections on the `ports` it names.

`AuthorizationPolicyBuilder` puts the project's authorization policy in project.yml itself, so the
people who sign the project see who may run what. NVFlare writes the policy into every server and
site startup kit as `local/authorization.json.default`. A client that names `accept_jobs_from: [org,
...]` in project.yml gets its own copy, in which `submit_job` (what a site checks, as the submitter,
before it deploys a job) holds for those organisations only. A site can still tighten its policy with
its own `local/authorization.json`.

`ComponentAllowListBuilder` adds vflflare's NVFlare components (`vflflare.flare.`) to NVFlare's
component allow list (`class_allow_list` in `local/resources.json.default`). vflflare jobs carry no
code: each site runs the vflflare it installed, and with `byoc: none` a job that brings code of its
own is refused ("BYOC not permitted").

`PrivateJobStoreBuilder` keeps what the kits' processes write readable by their owner only (`umask
077` in every kit's `sub_start.sh`), and moves the server's job store and snapshots from NVFlare's
shared `/tmp/nvflare/` into its own workspace (`vflflare.flare.job_store`, run at each start).

`StartCheckBuilder` makes each server and site kit's `startup/start.sh` stop at once, with a message,
when the `python3` on PATH cannot import NVFlare and vflflare (NVFlare's script would start its restart
loop in the background, return 0 and log "No module named nvflare" forever).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from nvflare.fuel.sec.authz import parse_policy_config
from nvflare.lighter.constants import CtxKey, PropKey
from nvflare.lighter.spec import Builder, Project, ProvisionContext

TEMPLATE_SECTION = "vflflare_authz"
ACCEPT_JOBS_FROM = "accept_jobs_from"


def accepting_jobs_from(policy: dict, orgs: list[str]) -> dict:
    """`policy` in which every role that may submit jobs may do so for submitters of `orgs` only."""
    policy = copy.deepcopy(policy)
    for rights in policy["permissions"].values():
        if isinstance(rights, dict) and rights.get("submit_job", "none") not in ("none", "no"):
            rights["submit_job"] = [f"o:{org}" for org in orgs]
    return policy


class AuthorizationPolicyBuilder(Builder):
    def __init__(self, permissions: dict, format_version: str = "1.0") -> None:
        """permissions: role -> "any" | "none" | {right: condition}, NVFlare's authorization.json
        syntax (conditions: "any", "none", "o:submitter", "n:submitter", "o:site", "o:<org>", ...)."""
        self.policy = {"format_version": format_version, "permissions": permissions}
        _, error = parse_policy_config(self.policy, {})
        if error:
            raise ValueError(f"AuthorizationPolicyBuilder: invalid permissions: {error}")

    def initialize(self, project: Project, ctx: ProvisionContext) -> None:
        # StaticFileBuilder writes local/authorization.json.default from the template section a
        # participant names in this property (the mechanism NVFlare's own CC builder uses)
        ctx[CtxKey.TEMPLATE][TEMPLATE_SECTION] = json.dumps(self.policy, indent=2) + "\n"
        for participant in [project.get_server(), *project.get_clients()]:
            if participant is None:
                continue
            section = TEMPLATE_SECTION
            orgs = participant.get_prop(ACCEPT_JOBS_FROM)
            if orgs is not None:
                if not isinstance(orgs, list) or not orgs or not all(isinstance(o, str) and o for o in orgs):
                    raise ValueError(
                        f"project.yml: {participant.name}'s {ACCEPT_JOBS_FROM} must be a list of "
                        f"organisation names, got {orgs!r}"
                    )
                section = f"{TEMPLATE_SECTION}_{participant.name}"
                ctx[CtxKey.TEMPLATE][section] = json.dumps(accepting_jobs_from(self.policy, orgs), indent=2) + "\n"
            participant.set_prop(PropKey.AUTHZ_SECTION_KEY, section)

    def build(self, project: Project, ctx: ProvisionContext) -> None:
        pass


COMM_CONFIG_FILE = "comm_config.json"


def enable_adhoc_connections(local_dir: str | Path, host: str, ports: str | list | None = None) -> Path:
    """Merge NVFlare's ad-hoc connection settings into a server's `local/comm_config.json`: its job
    cells listen on `host` (what the sites dial; any of `ports`, e.g. "8102-8120", else any free port)
    over stcp, TLS with the kit's certificates. Sites need no setting: they only dial out."""
    path = Path(local_dir) / COMM_CONFIG_FILE
    config = json.loads(path.read_text()) if path.is_file() else {}
    resources = {"host": host, **({"ports": ports} if ports else {})}
    config.update({"allow_adhoc_conns": True, "adhoc": {"scheme": "stcp", "resources": resources}})
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


class AdhocConnectionsBuilder(Builder):
    def __init__(self, ports: str | list | None = None, host: str | None = None) -> None:
        """ports: the server's port range for ad-hoc listeners (open them in its firewall); host: the
        name the sites dial, by default the server's default_host or name."""
        self.ports = ports
        self.host = host

    def build(self, project: Project, ctx: ProvisionContext) -> None:
        pass

    def finalize(self, project: Project, ctx: ProvisionContext) -> None:
        # finalize runs in reverse builder order: listed right after WorkspaceBuilder, this runs after
        # StaticFileBuilder has written any comm_config.json of its own and before the kits are moved
        server = project.get_server()
        enable_adhoc_connections(ctx.get_local_dir(server), self.host or server.get_default_host(), self.ports)


START_CHECK = """\
# vflflare.flare.provisioning.StartCheckBuilder: fail here, not in a restart loop, without NVFlare
if ! python3 -c "import nvflare, vflflare" >/dev/null 2>&1; then
  echo "start.sh: $(command -v python3 || echo 'no python3') on PATH cannot import nvflare and vflflare;" \\
       "activate the environment they are installed in (e.g. source /path/to/.venv/bin/activate), then run" \\
       "start.sh again" >&2
  exit 1
fi
"""


def add_start_check(start_sh: str | Path) -> Path:
    """START_CHECK right after the shebang of a kit's start.sh (once)."""
    path = Path(start_sh)
    text = path.read_text()
    if START_CHECK not in text:
        shebang, _, rest = text.partition("\n")
        path.write_text(f"{shebang}\n{START_CHECK}{rest}")
    return path


class StartCheckBuilder(Builder):
    def build(self, project: Project, ctx: ProvisionContext) -> None:
        pass

    def finalize(self, project: Project, ctx: ProvisionContext) -> None:
        for participant in [p for p in (project.get_server(), *project.get_clients()) if p is not None]:
            start = Path(ctx.get_kit_dir(participant)) / "start.sh"
            if start.is_file():
                add_start_check(start)


VFLFLARE_COMPONENTS = "vflflare.flare."


def allow_components(resources_file: str | Path, prefixes: list[str]) -> Path:
    """Add `prefixes` to the `class_allow_list` of a kit's resources file (once each)."""
    path = Path(resources_file)
    resources = json.loads(path.read_text())
    allowed = resources.setdefault("class_allow_list", [])
    allowed.extend(p for p in prefixes if p not in allowed)
    path.write_text(json.dumps(resources, indent=2) + "\n")
    return path


class ComponentAllowListBuilder(Builder):
    def __init__(self, prefixes: list[str] | None = None) -> None:
        """prefixes: component path prefixes the server and sites build for jobs without code of their
        own (default: vflflare's NVFlare components)."""
        self.prefixes = prefixes or [VFLFLARE_COMPONENTS]

    def build(self, project: Project, ctx: ProvisionContext) -> None:
        # listed after StaticFileBuilder (which writes the file) and before SignatureBuilder
        for participant in [p for p in (project.get_server(), *project.get_clients()) if p is not None]:
            allow_components(Path(ctx.get_local_dir(participant)) / "resources.json.default", self.prefixes)


PRIVATE_FILES = """\
# vflflare.flare.provisioning.PrivateJobStoreBuilder: what this participant writes is its owner's only
umask 077
"""
PRIVATE_JOB_STORE = """\
python3 -m vflflare.flare.job_store "$WORKSPACE" || exit 1
"""
AFTER_WORKSPACE = "while [[ $# -gt 0 ]]"


def add_private_files(sub_start_sh: str | Path, server: bool) -> Path:
    """PRIVATE_FILES (and, on the server, PRIVATE_JOB_STORE) in a kit's sub_start.sh, once its
    WORKSPACE is known."""
    path = Path(sub_start_sh)
    text = path.read_text()
    block = PRIVATE_FILES + (PRIVATE_JOB_STORE if server else "")
    if block not in text:
        if AFTER_WORKSPACE not in text:
            raise ValueError(f"{path}: no {AFTER_WORKSPACE!r} line to put the private job store before")
        text = text.replace(AFTER_WORKSPACE, block + AFTER_WORKSPACE, 1)
        path.write_text(text)
    return path


class PrivateJobStoreBuilder(Builder):
    def build(self, project: Project, ctx: ProvisionContext) -> None:
        pass

    def finalize(self, project: Project, ctx: ProvisionContext) -> None:
        server = project.get_server()
        for participant in [p for p in (server, *project.get_clients()) if p is not None]:
            sub_start = Path(ctx.get_kit_dir(participant)) / "sub_start.sh"
            if sub_start.is_file():
                add_private_files(sub_start, participant is server)
