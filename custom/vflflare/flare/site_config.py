"""Site-local configuration: where this party's data lives, and its private seed.

A job folder never names a path, so the same job runs unchanged on every site. Each party (a site,
or the server for a server-hosted label party) finds its data root, in this order:

1. the component's ``data_root`` argument (a job made for one deployment only);
2. ``<site workspace>/local/vflflare.json``, ``{"data_root": "/data/vfl"}``: the site's own
   configuration, written by the site's operator next to NVFlare's ``local/resources.json``
   (``poc/run.sh`` writes one per site);
3. the environment variable ``VFLFLARE_DATA_ROOT`` (simulator and POC default);
4. none: the embedded default table.

``{"private_seed": "..."}`` in the same file makes the party's defense noise repeatable for benchmarks
(privacy/private_randomness.py); it stays in the party's kit and never goes in a job.
``{"enforce": {"representation_noise": 0.5}}`` sets defenses the party applies whatever the job asks
(privacy/enforcement.py); the file only, no environment variable: one environment often serves every party
of a simulator or POC, and each party enforces only the defenses it applies itself.

The data root holds the party's folder: ``<root>/<site-name>/`` for a site, ``<root>/server/`` for
the server. A relative ``data_root`` in the file is relative to the file's folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from vflflare.data.errors import DataError, site_owner
from vflflare.data.loading import resolve_data_root
from vflflare.privacy.enforcement import ENFORCE_KEY, Enforcement, parse_enforcement
from vflflare.privacy.private_randomness import PRIVATE_SEED_KEY

SITE_CONFIG_FILE = "vflflare.json"
DATA_ROOT_KEY = "data_root"


def site_config_path(fl_ctx) -> Path | None:
    """`<workspace>/local/vflflare.json` of the site or server running this FL context, or None when
    the context has no workspace (a unit test)."""
    workspace = None
    engine = fl_ctx.get_engine() if fl_ctx is not None else None
    if engine is not None and hasattr(engine, "get_workspace"):
        workspace = engine.get_workspace()
    if workspace is None and fl_ctx is not None:
        from nvflare.apis.fl_constant import FLContextKey

        workspace = fl_ctx.get_prop(FLContextKey.WORKSPACE_OBJECT)
    if workspace is None:
        return None
    return Path(workspace.get_site_config_dir()) / SITE_CONFIG_FILE


def read_site_config(path: Path, owner: str) -> dict:
    """The site's vflflare.json; {} when there is none. A malformed file is an error naming it."""
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError.at(owner, path, f"not a valid JSON file: {error}") from error
    if not isinstance(config, dict):
        raise DataError.at(owner, path, f'expected a JSON object like {{"{DATA_ROOT_KEY}": "/data/vfl"}}')
    return config


def data_root_from_file(path: Path | None, owner: str) -> str | None:
    if path is None:
        return None
    value = read_site_config(path, owner).get(DATA_ROOT_KEY)
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise DataError.at(owner, path, f"'{DATA_ROOT_KEY}' must be a path string, got {value!r}")
    root = Path(os.path.expanduser(value))
    return str(root if root.is_absolute() else (path.parent / root).resolve())


def local_private_seed(fl_ctx, party: str) -> str | None:
    """The party's `private_seed` from its local/vflflare.json, or None."""
    path = site_config_path(fl_ctx)
    if path is None:
        return None
    value = read_site_config(path, site_owner(party)).get(PRIVATE_SEED_KEY)
    if value in (None, ""):
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise DataError.at(site_owner(party), path, f"'{PRIVATE_SEED_KEY}' must be a string or an integer")
    return str(value)


def local_enforcement(fl_ctx, party: str) -> Enforcement | None:
    """The defenses `party` enforces, from the `enforce` object of its local/vflflare.json, or None."""
    path = site_config_path(fl_ctx)
    if path is None:
        return None
    return enforcement_from_file(path, party)


def enforcement_from_file(path: Path, party: str) -> Enforcement | None:
    """The `enforce` object of the vflflare.json at `path`, checked (privacy/enforcement.py), or None."""
    return parse_enforcement(read_site_config(path, site_owner(party)).get(ENFORCE_KEY), path, party)


def resolve_party_data_root(argument: str | None, fl_ctx, party: str) -> str | None:
    """The data root of `party` (a site name or "server"), running `fl_ctx`: argument, then
    local/vflflare.json, then VFLFLARE_DATA_ROOT, then None (the embedded default)."""
    if argument:
        return argument
    return data_root_from_file(site_config_path(fl_ctx), site_owner(party)) or resolve_data_root()


def write_site_config(workspace: str | Path, data_root: str | Path) -> Path:
    """Write `<workspace>/local/vflflare.json` pointing at `data_root` (what a site operator does by
    hand; poc/run.sh and the deployment tests use it)."""
    path = Path(workspace) / "local" / SITE_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({DATA_ROOT_KEY: str(Path(data_root).resolve())}, indent=2) + "\n")
    return path


def kit_username(kit: str | Path) -> str:
    """The user an admin startup kit belongs to (fed_admin.json, else the certificate's CN)."""
    kit = Path(kit)
    admin = json.loads((kit / "startup" / "fed_admin.json").read_text()).get("admin", {})
    if admin.get("username"):
        return admin["username"]
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_pem_x509_certificate((kit / "startup" / "client.crt").read_bytes())
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
