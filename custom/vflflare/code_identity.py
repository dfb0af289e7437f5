"""Which vflflare a party runs: its release (`vflflare.__version__`) and a digest of its code, the SHA-256 of
the installed package's .py files (each file's path relative to the package, then its bytes, in path order).

Sites run vflflare installed as a package (a job ships no code), so every party of a job must have installed
the same one. The coordinator sends its identity with every task (a header, outside the counted payload,
flare/transport.py); a site whose own differs refuses the task with `mismatch`'s message, which ends the job
(flare/executor.py). The coordinator's identity is in the results under "vflflare".
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import vflflare

CODE_HEADER = "vflflare_code"  # the coordinator's identity on each task it sends
# tests only: "<party>=<version>:<code>[,...]" makes that party report this identity instead of its own
TEST_HOOK_ENV = "VFLFLARE_TEST_CODE_IDENTITY"
SHOWN = 12  # hex digits of a digest an error message shows


def code_digest(root: str | Path) -> str:
    """SHA-256 over the .py files under `root`: sorted relative paths, each with its length and bytes."""
    root = Path(root)
    digest = hashlib.sha256()
    for rel, path in sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*.py")):
        data = path.read_bytes()
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _installed() -> tuple[str, str]:
    return vflflare.__version__, code_digest(Path(vflflare.__file__).resolve().parent)


def code_identity(party: str | None = None) -> dict[str, str]:
    """This process's {"version", "code"}, computed once per process. `party` (a site name or "server") is
    read only for the test hook VFLFLARE_TEST_CODE_IDENTITY."""
    for entry in filter(None, os.environ.get(TEST_HOOK_ENV, "").split(",")):
        name, _, identity = entry.partition("=")
        if party is not None and name.strip() == party:
            version, _, code = identity.partition(":")
            return {"version": version.strip(), "code": code.strip()}
    version, code = _installed()
    return {"version": version, "code": code}


def describe(identity: dict[str, str]) -> str:
    return f"{identity.get('version')} (code {str(identity.get('code'))[:SHOWN]})"


def mismatch(site: str, own: dict[str, str], server: dict[str, str]) -> str | None:
    """None when `site` runs the coordinator's vflflare; else the error that ends the job."""
    if own.get("version") == server.get("version") and own.get("code") == server.get("code"):
        return None
    return (
        f"{site} runs vflflare {describe(own)}, the server {describe(server)}: install the same vflflare "
        f"release on every site"
    )
