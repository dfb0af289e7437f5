"""ARCHITECTURE.md's "how to add an algorithm", as a test: a toy plug-in defined in this file alone
("local-only": each site fits its bottom model to its own rows, then uploads representations once),
registered, and run in process and by the NVFlare simulator through VFLRecipe, with exact counts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from vflflare.algorithms.blocks.representations import FINAL_PARTS, train_classifier, upload_representations
from vflflare.algorithms.plugin import Algorithm
from vflflare.config import ConfigError, JobConfig
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.payload import Payload
from vflflare.registry import algorithms, make_config, register
from vflflare.seeding import derive_seed, seeded_init

SITES = ["site-1", "site-2"]
PLUGIN_MODULE = Path(__file__).stem  # how the job's processes import this file (it travels in app/custom)


@dataclass
class LocalOnlyConfig(JobConfig):  # 1. its settings: the shared ones plus its own
    local_epochs: int = 3

    def validate(self) -> None:
        super().validate()
        self.check(self.local_epochs >= 1, "local_epochs", "must be >= 1")


class LocalOnlySite(FeatureParty):  # 2. its site-side step
    steps = ("fit_locally",)

    def fit_locally(self, payload: Payload) -> Payload:
        """Autoencode the site's aligned and unaligned rows (a linear decoder, MSE), no labels."""
        rows = torch.cat([self.rows_of("aligned"), self.rows_of("unaligned")])
        target = self.train_batch(rows).numeric
        with seeded_init(derive_seed(self.seed, "decoder")):  # same weights in any process
            decoder = torch.nn.Linear(self.cfg.rep_dim, target.shape[1])
        optimizer = torch.optim.Adam([*self.encoder.parameters(), *decoder.parameters()], lr=self.cfg.lr)
        for _ in range(self.cfg.local_epochs):
            loss = F.mse_loss(decoder(self.encode(self.train_batch(rows))), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return {"loss": loss.item()}


class LocalOnly(Algorithm):  # 3. its phases, read like an algorithm box
    name = "local_only"
    Config, Site = LocalOnlyConfig, LocalOnlySite
    phases = ("local_training", "representations", "classifier")

    def run(self, net: Any, label: Any, rows: dict[str, int]) -> dict[str, float]:
        with net.ledger.phase("local_training"):
            net.exchange("fit_locally", {s: {} for s in net.sites})
        ctx = self.context(net, label)  # what the blocks take: the transport, label party, config, tracker
        reps = upload_representations(ctx, FINAL_PARTS)
        return train_classifier(ctx, reps)

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        return self.per_site(sites, feature=(1, 0), label_extra=(0, 1))  # 4. its communications


register(LocalOnly)  # 5. one registry line


def local_only_config(**values: Any) -> dict[str, Any]:
    return {"algorithm": "local_only", "plugins": [PLUGIN_MODULE], **values}


def test_registered_and_validated():
    assert algorithms()["local_only"] is LocalOnly
    assert LocalOnly.site_tasks() == [
        "setup",
        "align",
        "psi_labels",
        "resume_from_checkpoint",
        "represent",
        "fit_locally",
        "label.fit_classifier",
    ]
    with pytest.raises(ConfigError, match=r"algorithm 'local_only' has no setting \['ssl_epochs'\]"):
        make_config(local_only_config(ssl_epochs=3))
    with pytest.raises(ConfigError, match="algorithm 'local_only': local_epochs must be >= 1, got 0"):
        make_config(local_only_config(local_epochs=0))
    with pytest.raises(ConfigError, match="algorithm 'local_only': local_epochs must be int, got str 'three'"):
        make_config(local_only_config(local_epochs="three"))


@pytest.mark.parametrize("label_owner", ["server", "site-2"])
def test_in_process(label_owner):
    results = run_inprocess(make_config(local_only_config(label_owner=label_owner)), SITES, None)
    assert results["metrics"]["test_auc"] > 0.9
    counted = {s: {k: v[k] for k in ("uploads", "downloads")} for s, v in results["communication"]["per_site"].items()}
    assert counted == results["expected_communication"]
    assert counted["site-1"] == {"uploads": 1, "downloads": 0}


@pytest.mark.simulator
def test_in_the_nvflare_simulator(tmp_path):
    from nvflare.recipe import SimEnv

    from vflflare.recipes import VFLRecipe

    recipe = VFLRecipe(
        algorithm="local_only", min_clients=2, config={"plugins": [PLUGIN_MODULE]}, plugin_files=[__file__]
    )
    recipe.execute(SimEnv(num_clients=2, workspace_root=str(tmp_path)))
    results = json.loads(next(tmp_path.rglob("vflflare_results.json")).read_text())
    assert "error" not in results, results.get("error")
    reference = run_inprocess(make_config(local_only_config()), SITES, None)
    assert results["metrics"] == reference["metrics"]
    per_site = results["communication"]["per_site"]
    assert {s: (v["uploads"], v["downloads"]) for s, v in per_site.items()} == {"site-1": (1, 0), "site-2": (1, 0)}
    assert {s: v["payload_bytes"] for s, v in per_site.items()} == {
        s: v["payload_bytes"] for s, v in reference["communication"]["per_site"].items()
    }
