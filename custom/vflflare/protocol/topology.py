"""Every expected site takes part, or the job fails naming the ones that do not (issue 25).

A job knows its sites: at least `min_sites` of them (the recipe's min_clients, the controller's
`min_sites`), and exactly `JobConfig.sites` where the job names them (`VFLRecipe(sites=...)`,
`job.py --sites a,b`, `vflflare jobs --sites a,b`). Before setup the coordinator compares the sites
that joined with that list, and with what the data root it can see says (VFLFLARE_DATA_ROOT layout
`<root>/<site>/`): the sites of a `vflflare split` manifest, and the site folders (a folder holding
a train.csv) when there is no manifest, as with a user's own data. A site of the job or of the data
that is not taking part is an error naming it, instead of a run on the others that leaves its
columns out.

How NVFlare 2.9 starts a job, and why the job's meta.json asks for 2 sites whatever the job expects
(read in nvflare/app_common/job_schedulers/job_scheduler.py, private/fed/server/fed_server.py):
- the scheduler starts a job once `meta.json` min_clients sites are connected, and deploys it to the
  sites connected at that moment (deploy_map `@ALL`). With fewer, it only records "connected sites
  (2) < min_sites (3)" in the job's schedule history, retries 10 times over about 30 minutes
  (10 s, doubling, up to 600 s apart), then ends the job as FINISHED:CAN_NOT_SCHEDULE: no results
  file, no site named. So meta.json keeps min_clients at vertical FL's minimum, 2, and the
  vflflare controller carries the job's own expectation (min_sites, config `sites`).
- at the server, `engine.get_clients()` in the job's process is the job's participants (the sites it
  was deployed to, fixed when it was scheduled: `sync_clients_from_main_process`), not every
  connected site; a site that connects later never joins a running job. So a named site that is not a
  participant fails the job at once: waiting for it could not help. `join_timeout` covers the other
  way a site can be missing: a participant whose job process never comes up (a simulator site whose
  process failed to start, a POC site's job process that died while starting) picks up no task, and
  the transport ends the wait on it after join_timeout (flare/liveness.py), naming it.
- in the simulator every `-n`/`--sites` client is a participant from the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vflflare.config import SERVER, duplicates
from vflflare.data.errors import PartyError

COORDINATOR = "coordinator"  # who the data-root check speaks for in its messages


class TopologyError(PartyError):
    """The sites taking part are not the job's: `site` is the first one missing (or extra). Its message
    names sites only, so it is its own public form."""

    def __init__(self, message: str, site: str | None = None) -> None:
        super().__init__(message)
        self.site = site


def check_unique(names: Sequence[str], where: str) -> list[str]:
    """`names` as a list, or a TopologyError calling a repeated name a duplicate (not "too few sites")."""
    repeated = duplicates(names)
    if repeated:
        raise TopologyError(
            f"duplicate site names in {where}: {repeated} given more than once in {list(names)}; "
            f"every site needs its own name"
        )
    return list(names)


def site_folders(data_root: str | Path) -> list[str]:
    """The site folders of a data root: sub-folders holding a train.csv (or train.parquet), other than the
    server's."""
    from vflflare.data.columnar import parquet_twin
    from vflflare.data.schema import TRAIN_FILE

    root = Path(data_root)
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.name != SERVER and ((p / TRAIN_FILE).is_file() or parquet_twin(p / TRAIN_FILE).is_file())
    )


def check_joined(joined: Sequence[str], expected: Sequence[str], min_sites: int) -> None:
    """The sites taking part (`joined`) against the job's: its named sites, or at least min_sites."""
    missing = sorted(set(expected) - set(joined))
    extra = sorted(set(joined) - set(expected)) if expected else []
    if missing or extra:
        problems = [f"sites of the job that did not join: {missing}"] if missing else []
        problems += [f"sites that joined but are not in the job: {extra}"] if extra else []
        raise TopologyError(
            f"the job's sites are {sorted(expected)} but {sorted(joined)} joined; "
            + "; ".join(problems)
            + " (NVFlare runs a job on the sites connected when it starts it: connect exactly the "
            "job's sites and submit it again; in the simulator, --sites " + ",".join(expected) + ")",
            site=(missing or extra)[0],
        )
    if len(joined) < min_sites:
        raise TopologyError(
            f"the job needs at least {min_sites} sites (min_clients) but only {len(joined)} joined: "
            f"{sorted(joined)}; {min_sites - len(joined)} more must be connected when it starts"
        )


def check_data_sites(owner: str, data_root: str | None, sites: Sequence[str]) -> None:
    """The data root against the sites taking part: its manifest's sites, else its site folders. A folder
    no site of the job reads would be left out silently (a user's own data has no manifest)."""
    from vflflare.data.errors import DataError
    from vflflare.data.loading import check_sites_match
    from vflflare.data.schema import MANIFEST_FILE

    if data_root is None or not Path(data_root).is_dir():
        return  # the embedded default, or a root only a party's own loader can explain
    if (Path(data_root) / MANIFEST_FILE).is_file():
        check_sites_match(owner, data_root, list(sites))
        return
    unused = sorted(set(site_folders(data_root)) - set(sites))
    if unused:
        error = DataError.at(
            owner,
            data_root,
            f"site folders {unused} are not used by the job, which runs with "
            f"{sorted(sites)}: their columns would be left out (run with every "
            f"site of the data, or move those folders out of the data root)",
        )
        error.site = unused[0]  # the results' "site"
        raise error


def check_job_sites(
    owner: str, joined: Sequence[str], expected: Sequence[str], min_sites: int, data_root: str | None
) -> None:
    """All of the above, before any data moves: names unique, the job's sites joined, the data's used."""
    check_unique(joined, "the job's sites")
    check_joined(joined, expected, min_sites)
    check_data_sites(owner, data_root, joined)
