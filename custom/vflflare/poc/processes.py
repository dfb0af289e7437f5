"""Process bookkeeping for local deployments (POC, provisioned kits on localhost).

NVFlare's services outlive the command that starts them (start.sh puts sub_start.sh in the
background) and launch every job in a new session, so killing one process group is not enough.
What this module stops is exactly what we started:
- every process whose command line names our own, unique workspace folder, and
- on request, every descendant of this process (poc/run.sh becomes a child subreaper, so orphans
  stay its descendants).
Never this process or its ancestors. Linux only (/proc); nothing here looks at processes by
program name.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process instead of init, so they can be found
    and stopped. Returns False where the platform does not support it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def free_port() -> int:
    """A TCP port that is free on localhost right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process we can see."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        table[int(entry.name)] = (ppid, cmdline)
    return table


def our_processes(marker: str | os.PathLike | None = None, descendants: bool = False) -> list[int]:
    """Processes whose command line contains `marker` (a unique workspace path) and, with
    `descendants`, every descendant of this process; never this process or its ancestors."""
    me = os.getpid()
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), [me] if descendants else []
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    if marker:
        text = str(marker)
        found.update(pid for pid, (_, cmd) in table.items() if text in cmd)
    pid = me  # never this process or one of its ancestors (a shell whose command names the marker)
    while pid in table and pid not in (0, 1):
        found.discard(pid)
        pid = table[pid][0]
    found.discard(me)
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes; reap it if it is our child
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return False
    except (OSError, IndexError):
        return False
    return True


def stop_processes(
    marker: str | os.PathLike | None = None, descendants: bool = False, grace_s: float = 5.0
) -> list[int]:
    """SIGTERM our processes (see our_processes), wait up to grace_s, then SIGKILL what is left.
    Returns the pids that were signalled."""
    signalled: set[int] = set()
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        pids = [p for p in our_processes(marker, descendants) if _alive(p)]
        for pid in pids:
            try:
                os.kill(pid, sig)
                signalled.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if pids:
                time.sleep(0.2)
        if not pids:
            break
    return sorted(signalled)
