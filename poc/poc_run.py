"""Run one vflflare job end to end in an NVFlare POC: real server, site and admin processes on
this machine. Called by poc/run.sh; see poc/README.md.

Steps (each one printed with its wall time):
 1. stage: copy the job with the vflflare package in app/custom (jobs/ is never modified)
 2. prepare: `nvflare poc prepare -n K [-he]`; with a port other than 8002 the generated project.yml
    gets that port and is provisioned again with `-i`
 3. data: each party gets its own data location: <workspace>/site_data/<party>/ holding only a link
    to its folder of --data-root, named in <party's POC workspace>/local/vflflare.json
 4. ad-hoc connections (unless --no-adhoc or --link-*): the server's local/comm_config.json lets each
    site's job process connect straight to the server's job process over mutual TLS; with
    --link-rtt-ms/--link-mbit the sites instead dial an emulated wide-area link to the server
    (vflflare/poc/wan_link.py), which every site message then crosses; each site has its own port and
    bandwidth there, optionally with --link-jitter-ms and --link-loss
 5. start: `nvflare poc start` (server and sites)
 6. submit: `nvflare job submit` with the POC project admin's startup kit, `nvflare job wait`
 7. collect: `nvflare job download` (the server's job workspace, with vflflare_results.json) and a
    copy of each site's job folder (logs) under <workspace>/results/<job id>/
 8. stop and clean: `nvflare poc stop`, then any process we started that is still alive is
    stopped, then `nvflare poc clean` (unless --keep)

Exit status: 0 when the job completed and its results have no "error", 1 when the job failed or
timed out, 2 when the POC could not be set up.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path

from vflflare.poc.processes import become_subreaper
from vflflare.poc.runner import PocRun, SetupError
from vflflare.poc.wan_link import JITTER
from vflflare.user_paths import user_temp

__all__ = ["PocRun", "SetupError", "main", "parse_args"]  # the tests drive a run through these


def site_names(value: str) -> int | list[str]:
    """--sites: a number K, or comma-separated unique names (at least 2, each a valid NVFlare client name)."""
    if value.strip().isdigit():
        return int(value)
    names = [n.strip() for n in value.split(",") if n.strip()]
    from vflflare.protocol.topology import check_unique

    try:
        check_unique(names, "--sites")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    if len(names) < 2:
        raise argparse.ArgumentTypeError(f"vertical FL needs at least 2 sites, got {names}")
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", n) or n == "server"]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad}: a site name is letters, digits, '-', '_' or '.', and not 'server'")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="poc/run.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("job", help="job folder, e.g. jobs/oneshot_vfl")
    parser.add_argument(
        "--sites",
        type=site_names,
        help="the sites: their names (--sites broker,insurer) or a number K (site-1..site-K); default: the "
        "names the job gives, else the site folders of --data-root, else the job's min_clients (at least 2)",
    )
    parser.add_argument(
        "--he", action="store_true", help="provision HE (TenSEAL CKKS) contexts: nvflare poc prepare -he"
    )
    parser.add_argument(
        "--data-root",
        default=os.environ.get("VFLFLARE_DATA_ROOT"),
        help="folder with <site>/ and server/ subfolders (vflflare split --out); "
        "default: $VFLFLARE_DATA_ROOT, else the embedded default",
    )
    parser.add_argument(
        "--workspace", default=str(user_temp("poc")), help="everything this run writes (default %(default)s, your own)"
    )
    parser.add_argument(
        "--port", type=int, help="server port (FL and admin); default 8002, or a free one if 8002 is taken"
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds to wait for the job (default 1800)")
    parser.add_argument("--start-timeout", type=int, default=120, help="seconds to wait for the sites to connect")
    parser.add_argument("--stop-timeout", type=int, default=90, help="seconds to wait for `nvflare poc stop`")
    parser.add_argument("--keep", action="store_true", help="keep the POC workspace (startup kits, logs) after the run")
    parser.add_argument(
        "--no-adhoc",
        dest="adhoc",
        action="store_false",
        help="route every message through the server's and sites' parent processes, NVFlare's default "
        "(default here: site job cells connect straight to the server's job cell over mutual TLS)",
    )
    parser.add_argument(
        "--link-rtt-ms",
        type=float,
        help="emulate a wide-area link between the sites and the server: "
        "this round-trip time in ms (vflflare/poc/wan_link.py; turns ad-hoc connections off)",
    )
    parser.add_argument(
        "--link-mbit",
        type=float,
        help="the emulated link's bandwidth in Mbit/s per site, each way, shared by the site's connections "
        "(default: unlimited)",
    )
    parser.add_argument(
        "--link-jitter-ms",
        type=float,
        default=0.0,
        help="vary each chunk's one-way delay by this much (never reordering a connection's bytes; default 0)",
    )
    parser.add_argument(
        "--link-jitter",
        choices=JITTER,
        default="uniform",
        help="the jitter's distribution: uniform in +-jitter, or normal with that standard deviation",
    )
    parser.add_argument(
        "--link-loss",
        type=float,
        default=0.0,
        help="the probability that a TCP segment is lost; a chunk that lost one arrives --link-loss-penalty-ms "
        "later, nothing is dropped (default 0)",
    )
    parser.add_argument(
        "--link-loss-penalty-ms",
        type=float,
        help="what a loss delays its chunk by (default: one round trip, fast retransmit; 200+: a timeout)",
    )
    return parser.parse_args(argv)


def _terminate(signum, frame):  # SIGTERM/SIGHUP: unwind through the finally that stops the POC
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (Path(args.job) / "meta.json").is_file():
        print(f"poc/run.sh: {args.job} is not a job folder (no meta.json)", file=sys.stderr)
        return 2
    become_subreaper()
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    run = PocRun(args)
    run.work.mkdir(parents=True, exist_ok=True)
    try:
        return run.run()
    except SetupError as error:
        print(f"poc/run.sh: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("poc/run.sh: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish cleaning up even if asked twice
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        run.stop()
        run.log("done")


if __name__ == "__main__":
    sys.exit(main())
