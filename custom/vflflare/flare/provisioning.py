"""Provisioning helpers for a real vflflare deployment (used from provisioning/project.yml).

`AuthorizationPolicyBuilder` puts the project's authorization policy in project.yml itself, so the
people who sign the project see who may run what. NVFlare writes the policy into every server and
site startup kit as `local/authorization.json.default`. A site can still tighten it with its own
`local/authorization.json`.

vflflare jobs bring their own code (app/custom). NVFlare 2.9 then checks the submitter's `byoc`
right, on the server and on every site. The policy must grant `submit_job` and `byoc` to the role
that submits jobs.
"""
from __future__ import annotations

import json

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
