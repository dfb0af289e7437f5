"""What an algorithm plug-in declares. The controller, executor, CLI, job generator and results code
only ever talk to this interface; registry.py maps names to plug-ins.

A plug-in is a subclass of `Algorithm` with
- `Config`: its config class, a JobConfig subclass (its own settings and those of the blocks it uses);
- `Site` / `Label`: the FeatureParty and LabelParty subclasses holding its site-side and label-side
  steps (a site answers the names in `Site.steps`, a label-owning site the names in `Label.channels`);
- `phases`: the ledger phases `run` goes through, in order (after the shared "setup");
- `run(net, label, rows)`: the coordinator's side, read top to bottom like the paper's algorithm box;
- `expected_communications`: the uploads and downloads per site the paper's protocol implies, checked
  against the ledger by the tests and shown in the results table.
"""

from __future__ import annotations

from typing import Any, ClassVar

from vflflare.config import SERVER, JobConfig
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.label_party import LabelParty
from vflflare.protocol.party_setup import Aligned, PartySetup
from vflflare.protocol.run_context import RunContext
from vflflare.protocol.transport import Transport
from vflflare.tracking import Tracker

# tasks every data-holding site answers whatever the algorithm (protocol/site_runtime.py)
PROTOCOL_TASKS = ("setup", "align", "psi_labels", "resume_from_checkpoint")


class Algorithm:
    name: ClassVar[str]
    Config: ClassVar[type[JobConfig]] = JobConfig
    Site: ClassVar[type[FeatureParty]] = FeatureParty
    Label: ClassVar[type[LabelParty]] = LabelParty
    phases: ClassVar[tuple[str, ...]] = ()
    job_name: ClassVar[str | None] = None  # its folder in jobs/ (exported by `vflflare jobs`), if it ships one
    setup: ClassVar[PartySetup] = Aligned()  # how its parties are set up before `run` (protocol/party_setup.py)

    def __init__(self, cfg: JobConfig, tracker: Tracker, he_context: Any = None) -> None:
        self.cfg, self.tracker, self.he_context = cfg, tracker, he_context
        self.info: dict[str, Any] = {}  # what the run reports besides metrics (epochs run, ...)
        # the coordinator's workspace root (saved models, checkpoints) and this job's id, set by the runner
        self.runs_root: str | None = None
        self.job_id: str | None = None
        self.data_root: str | None = None  # the coordinator's (a label party there reads its score IDs in it)

    def context(self, net: Transport, label: Any) -> RunContext:
        """This run as its blocks take it."""
        return RunContext(net, label, self.cfg, self.tracker, self.info, self.he_context)

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        """Phases after setup; `rows` counts the aligned parts ("aligned_train", "val", "test")."""
        raise NotImplementedError

    @classmethod
    def site_tasks(cls) -> list[str]:
        """Every task a site of this algorithm's job may receive as an NVFlare task."""
        if not cls.setup.holds_data:
            return list(cls.setup.stateless_steps())
        label_tasks = ["label." + m for m, channel in cls.Label.label_channels().items() if channel == "exchange"]
        return [*PROTOCOL_TASKS, *cls.Site.site_steps(), *label_tasks]

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        """{site: {"uploads": u, "downloads": d}} this run should have made; default: none."""
        return {s: {"uploads": 0, "downloads": 0} for s in sites}

    def per_site(self, sites: list[str], feature: tuple[int, int], label_extra: tuple[int, int]) -> dict:
        """Counts for every site: `feature` (uploads, downloads) each, plus `label_extra` for the site
        that hosts the label party (the coordinator relays the other sites' traffic to it)."""
        out = {}
        for site in sites:
            extra = label_extra if site == self.cfg.label_owner != SERVER else (0, 0)
            out[site] = {"uploads": feature[0] + extra[0], "downloads": feature[1] + extra[1]}
        return out
