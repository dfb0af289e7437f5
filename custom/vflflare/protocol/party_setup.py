"""How a plug-in's parties are set up before its `run`: each plug-in declares one of these strategies as
`setup`, and the runner (coordinator) and site runtime call it. Nothing else asks which kind a plug-in is.

- `Aligned`: setup.py's phase 0. The sites' IDs are intersected, a label party sits at the coordinator or at
  one site, and the aligned rows are split into training, validation and test (vanilla, one-shot, ...).
- `SiloSpace`: silo_setup.py. Every site holds its own rows and labels, the coordinator forms the union of
  their rows, and there is no label party (CFL).
- `Stateless`: no setup and no data. The sites answer the plug-in's `steps` from the payload alone
  (secure_sum), or a task set of their own (vertical_inference: SiteRuntime's scorer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vflflare.config import SERVER, JobConfig
from vflflare.data.loading import check_silo_space
from vflflare.protocol.setup import setup_parties
from vflflare.protocol.silo_setup import setup_silo_space
from vflflare.wire import Payload

if TYPE_CHECKING:
    from vflflare.protocol.setup import SetupInputs

PSI_ITEMS = ("tables", "score_file")


@dataclass(frozen=True)
class PartySetup:
    # what a PSI phase run first in the job (VFLRecipe(psi=True)) intersects: "tables", the sites' train and
    # test IDs, or "score_file", the IDs of each site's file of new rows (config keys model_job, score_file)
    psi_items: str = "tables"
    holds_data = True  # the sites load their tables at setup
    saves_model = False  # the parties keep a vertical model for scoring when the job ends (model_store.py)
    active_site_labels = False  # the label-owning site also holds the labels of its unaligned rows

    def __post_init__(self) -> None:
        if self.psi_items not in PSI_ITEMS:
            raise ValueError(f"psi_items must be one of {PSI_ITEMS}, got {self.psi_items!r}")

    def coordinator(self, inputs: SetupInputs) -> tuple[Any, dict[str, int], dict]:
        """Phase 0 at the coordinator: (the label party or its proxy, aligned row counts, the alignment report)."""
        return None, {}, {}

    def hosts_label(self, cfg: JobConfig, party: str) -> bool:
        """Whether `party` (SERVER or a site) hosts a label party in this job."""
        return False

    def check_site(self, site: str, data_root: str | None, cfg: JobConfig) -> None:
        """A site's check of its data folder before it loads its tables."""

    def stateless_steps(self) -> Mapping[str, Callable[[str, Payload], Payload]]:
        return {}


@dataclass(frozen=True)
class Aligned(PartySetup):
    """Intersect the sites' IDs; one label party. `aligned_unlabeled`: setup also tells each site its aligned
    rows that have no label (part "aligned_unlabeled"). `active_site_labels`: the label owner is a site that
    also holds the labels of its unaligned rows (VFLHLP's active party); the embedded default split then
    gives it those, and the default job names a site as owner."""

    aligned_unlabeled: bool = False
    active_site_labels: bool = False
    saves_model = True

    def coordinator(self, inputs: SetupInputs) -> tuple[Any, dict[str, int], dict]:
        return setup_parties(inputs, unlabeled_part=self.aligned_unlabeled)

    def hosts_label(self, cfg: JobConfig, party: str) -> bool:
        return cfg.label_owner == party


@dataclass(frozen=True)
class SiloSpace(PartySetup):
    """Every site its own rows and labels (a silo space): the union of their rows, no label party."""

    def coordinator(self, inputs: SetupInputs) -> tuple[Any, dict[str, int], dict]:
        return setup_silo_space(inputs.net, inputs.cfg, inputs.tracker)

    def hosts_label(self, cfg: JobConfig, party: str) -> bool:
        return party != SERVER  # every silo holds the labels of its own rows

    def check_site(self, site: str, data_root: str | None, cfg: JobConfig) -> None:
        check_silo_space(site, data_root, cfg.algorithm)


@dataclass(frozen=True)
class Stateless(PartySetup):
    """No setup, no site data: the sites answer `steps` (task -> fn(site name, payload) -> reply)."""

    steps: Mapping[str, Callable[[str, Payload], Payload]] = field(default_factory=dict)
    holds_data = False

    def stateless_steps(self) -> Mapping[str, Callable[[str, Payload], Payload]]:
        return self.steps
