"""The server's job store and snapshots inside its own workspace, readable by its owner only.

NVFlare's kits keep both under `/tmp/nvflare/`: world-readable, shared by every deployment on the
machine (a second server lists and serves the first one's jobs) and lost on reboot. The paths in
`local/resources.json.default` must be absolute, and a kit does not know where it will be unpacked, so
`PrivateJobStoreBuilder` makes the server's `sub_start.sh` run this module at every start: it writes
`local/resources.json` (which NVFlare reads instead of the default) with both stores under the
workspace. An operator's own `local/resources.json` (without MARKER) is left alone.

    python3 -m vflflare.flare.job_store WORKSPACE
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

MARKER = "vflflare_private_job_store"
JOB_STORE = "jobs-storage"
SNAPSHOTS = "snapshot-storage"


def private_store_resources(workspace: str | Path) -> Path:
    """`<workspace>/local/resources.json`: the default resources with the job store and the snapshots in
    `<workspace>/jobs-storage` and `<workspace>/snapshot-storage` (mode 0700, the file 0600)."""
    workspace = Path(workspace).resolve()
    local = workspace / "local"
    target = local / "resources.json"
    if target.is_file() and MARKER not in json.loads(target.read_text()):
        print(f"job_store: {target} is the operator's own; its job store paths are kept", file=sys.stderr)
        return target
    config = json.loads((local / "resources.json.default").read_text())
    store, snapshots = workspace / JOB_STORE, workspace / SNAPSHOTS
    managers = [c for c in config.get("components", []) if c.get("id") == "job_manager"]
    if not managers or "snapshot_persistor" not in config:
        raise ValueError(
            f"{local / 'resources.json.default'} has no job_manager or snapshot_persistor: not a server kit"
        )
    for manager in managers:
        manager.setdefault("args", {})["uri_root"] = str(store)
    config["snapshot_persistor"]["args"]["storage"]["args"]["root_dir"] = str(snapshots)
    config[MARKER] = True
    for folder in (store, snapshots):
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(config, out, indent=2)
    target.chmod(0o600)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m vflflare.flare.job_store WORKSPACE")
    private_store_resources(sys.argv[1])
