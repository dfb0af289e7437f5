"""Provisioning helpers for a real vflflare deployment (used from provisioning/project.yml).

`AdhocConnectionsBuilder` lets each site's job process connect straight to the server's job process
(NVFlare's ad-hoc connections, over mutual TLS with the kits' certificates). A split-NN step then
takes two hops instead of four through the parent processes: about half the time
(benchmarks/SCALE_REPORT.md). The server must accept connections on the `ports` it names.

`AuthorizationPolicyBuilder` puts the project's authorization policy in project.yml itself, so the
people who sign the project see who may run what. NVFlare writes the policy into every server and
site startup kit as `local/authorization.json.default`. A site can still tighten it with its own
`local/authorization.json`.

`StartCheckBuilder` makes each server and site kit's `startup/start.sh` stop at once, with a message,
when the `python3` on PATH cannot import NVFlare (NVFlare's script would start its restart loop in the
background, return 0 and log "No module named nvflare" forever).

vflflare jobs bring their own code (app/custom). NVFlare 2.9 then checks the submitter's `byoc`
right, on the server and on every site. The policy must grant `submit_job` and `byoc` to the role
that submits jobs.
"""
from __future__ import annotations

import json
from pathlib import Path

from nvflare.fuel.sec.authz import parse_policy_config
from nvflare.lighter.constants import CtxKey, PropKey
from nvflare.lighter.spec import Builder, Project, ProvisionContext

TEMPLATE_SECTION = "vflflare_authz"


class AuthorizationPolicyBuilder(Builder):
    def __init__(self, permissions: dict, format_version: str = "1.0") -> None:
        """permissions: role -> "any" | "none" | {right: condition}, NVFlare's authorization.json
        syntax (conditions: "any", "none", "o:submitter", "n:submitter", "o:site", ...)."""
        self.policy = {"format_version": format_version, "permissions": permissions}
        _, error = parse_policy_config(self.policy, {})
        if error:
            raise ValueError(f"AuthorizationPolicyBuilder: invalid permissions: {error}")

    def initialize(self, project: Project, ctx: ProvisionContext) -> None:
        # StaticFileBuilder writes local/authorization.json.default from the template section a
        # participant names in this property (the mechanism NVFlare's own CC builder uses)
        ctx[CtxKey.TEMPLATE][TEMPLATE_SECTION] = json.dumps(self.policy, indent=2) + "\n"
        for participant in [project.get_server(), *project.get_clients()]:
            if participant is not None:
                participant.set_prop(PropKey.AUTHZ_SECTION_KEY, TEMPLATE_SECTION)

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
if ! python3 -c "import nvflare" >/dev/null 2>&1; then
  echo "start.sh: $(command -v python3 || echo 'no python3') on PATH cannot import nvflare; activate the" \\
       "environment NVFlare is installed in (e.g. source /path/to/.venv/bin/activate), then run start.sh again" >&2
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
