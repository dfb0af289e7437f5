"""Default folders per user: two people running jobs on one machine never share a workspace."""

from __future__ import annotations

import getpass
import tempfile
from pathlib import Path


def user_temp(name: str) -> Path:
    """`<temp dir>/vflflare-<user>/<name>`, e.g. /tmp/vflflare-alice/job_py."""
    return Path(tempfile.gettempdir()) / f"vflflare-{getpass.getuser()}" / name
