"""CFL (Ginanjar, Li, Hua, "Contrastive Federated Learning with Tabular Data Silos", paper 003): every
silo holds a vertical slice of the columns and its own labels; silos share knowledge only through the
federated average of their encoder/decoder weights (Algorithm 2):

  the server sends the seed -> each round: every silo trains its encoder E and decoder D on its tuple
  representations (Algorithm 1) over the union of rows in the shared order, a row it lacks being a zero
  row (null representation, Sec. 4.1), on L_t = L_r + L_c + L_d (Eq. 1-3) -> sends (w_e, w_d) -> FedAvg
  -> the average comes back -> after the last round each silo encodes its rows and fits a logistic
  regression on them against its own labels (Sec. 5).

Runs on a silo space (`vflflare split --silo-space`, protocol/silo_setup.py). FedAvg is the partial
aggregation block over the whole autoencoder (NVFlare's WeightedAggregationHelper; CKKS secure
aggregation with `he: true`). Reported per silo: CFL's test accuracy and the LL baseline's (logistic
regression on the silo's raw slice); the paper's delta accuracy needs the (imaginary) global table,
which no party holds: the cfl bench suite (bench/suites/cfl.py) computes it.

Our choices where the paper is open: Table 1's "encoder size" 256 as the hidden and output width of E
(E: d -> 256 -> 256, D: 256 -> d); Adam at cfl_lr 0.001 in batches of 128; noise rate z 0.2 and
Gaussian noise 0.1; 10 rounds of one local epoch; Pearson reordering on (Table 6: it helps some
datasets, hurts others); the logistic regression standardises its inputs and is scored on the silo's
test rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vflflare.algorithms.blocks.partial_aggregation import PartialAggregationSite, partial_model_aggregation
from vflflare.algorithms.plugin import Algorithm
from vflflare.config import SERVER, JobConfig, Settings
from vflflare.data.pearson_order import pearson_order
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.party_setup import SiloSpace
from vflflare.protocol.payload import Payload
from vflflare.protocol.transport import Transport
from vflflare.registry import register
from vflflare.seeding import derive_seed, seeded_init
from vflflare.ssl.losses.cfl import CFLLoss
from vflflare.ssl.tuple_views import tuple_views
from vflflare.tracking import Progress


@dataclass
class CFLSettings(Settings):
    cfl_rounds: int = 10  # none in the paper; Fig. 7's loss settles after ~200 steps; 10 rounds: ~2 800 on Adult
    cfl_local_epochs: int = 1  # passes over a silo's rows per round
    cfl_hidden: int = 256  # Table 1's encoder size
    cfl_batch_size: int = 128  # rows per step of a silo's local training
    cfl_lr: float = 0.001  # Adam's learning rate for the silo's encoder and decoder
    cfl_noise_rate: float = 0.2  # z of Algorithm 1
    cfl_gaussian_std: float = 0.1  # std of the Gaussian noise of the tuple views
    cfl_temperature: float = 0.5  # tau of the contrastive loss
    pearson_reordering: bool = True  # order each silo's columns by Pearson correlation first (the paper's step)
    # false: every silo trains alone, no FedAvg (the paper's non-FL contrastive baseline, with CFL's own
    # tuple views and loss rather than SubTab's feature subsets)
    cfl_fedavg: bool = True

    # ranges (Settings.validate checks them); a batch needs 2 rows for in-batch negatives
    bounds = {
        "cfl_rounds": (1, None),
        "cfl_local_epochs": (1, None),
        "cfl_hidden": (1, None),
        "cfl_batch_size": (2, None),
        "cfl_gaussian_std": (0, None),
    }

    def validate(self) -> None:
        super().validate()
        self.check(0.0 <= self.cfl_noise_rate <= 1.0, "cfl_noise_rate", "must be in [0, 1]")
        self.check(self.cfl_temperature > 0, "cfl_temperature", "must be > 0")


@dataclass
class CFLConfig(CFLSettings, JobConfig):
    he_with_server_labels = True  # no label party: under HE the coordinator only adds ciphertexts
    privacy_channels = frozenset()  # encoder weights only: no row leaves a silo

    def validate(self) -> None:
        super().validate()
        self.check(
            self.label_owner == SERVER,
            "label_owner",
            "does not apply to CFL: every silo holds the labels of its own rows",
        )
        self.check(self.alignment == "hash", "alignment", "must be 'hash': CFL matches the union of the silos' rows")


class AutoEncoder(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(width, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden))
        self.decoder = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


class CFLSite(PartialAggregationSite, FeatureParty):
    steps = ("silo_width", "cfl_local_training", "cfl_evaluate")

    def align_union(self, positions: np.ndarray) -> None:
        """The silo's row (or -1) at every position of the union, in the shared order (silo_setup.py)."""
        self.state["union"] = torch.as_tensor(np.asarray(positions, dtype=np.int64))

    def table(self, part: str) -> torch.Tensor:
        """The silo's own rows of `part` ("train" / "test") as one float matrix, columns in Pearson order."""
        n = self.view.num_rows(part)
        x = self.view.batch(part, torch.arange(n)).numeric.float()
        if "columns" not in self.state:
            order = pearson_order(x.numpy()) if self.cfg.pearson_reordering else np.arange(x.shape[1])
            self.state["columns"] = torch.as_tensor(order)
        return x[:, self.state["columns"]]

    def silo_width(self, payload: Payload) -> Payload:
        """Step: the slice width, which FedAvg needs equal at every silo; then the autoencoder, initialised
        alike at every silo (the job's seed) so that the first average is of comparable weights."""
        width = int(self.table("train").shape[1])
        with seeded_init(derive_seed(self.cfg.seed, "cfl_autoencoder")):
            self.state["autoencoder"] = self.on_device(AutoEncoder(width, self.cfg.cfl_hidden))
        self.state["optimizer"] = torch.optim.Adam(
            self.state["autoencoder"].parameters(), lr=self.cfg.cfl_lr, weight_decay=self.cfg.weight_decay
        )
        self.state["noise_generator"] = torch.Generator().manual_seed(derive_seed(self.seed, "cfl_noise"))
        return {"width": width}

    def shared_module(self) -> nn.Module:
        return self.state["autoencoder"]

    def cfl_local_training(self, payload: Payload) -> Payload:
        """Step: cfl_local_epochs passes over the union in the shared order of this round (Definition 4), a
        missing row as a zero row; returns the mean loss (a number)."""
        cfg, model = self.cfg, self.state["autoencoder"]
        own, union = self.table("train"), self.state["union"]
        order_generator = torch.Generator().manual_seed(derive_seed(cfg.seed, f"cfl_order:{payload['round']}"))
        loss_fn, losses = CFLLoss(cfg.cfl_temperature), []
        model.train()
        for epoch in range(cfg.cfl_local_epochs):
            order = torch.randperm(len(union), generator=order_generator)
            for start in range(0, len(order) - cfg.cfl_batch_size + 1, cfg.cfl_batch_size):
                rows = union[order[start : start + cfg.cfl_batch_size]]
                x = torch.zeros(len(rows), own.shape[1])
                x[rows >= 0] = own[rows[rows >= 0]]
                pairs = tuple_views(x, cfg.cfl_noise_rate, cfg.cfl_gaussian_std, self.state["noise_generator"])
                x = x.to(self.device)
                loss = sum(loss_fn(model(a.to(self.device)), model(b.to(self.device)), x) for a, b in pairs) / len(
                    pairs
                )
                losses.append(self.finite_loss(loss, "CFL local training", epoch, start // cfg.cfl_batch_size))
                self.state["optimizer"].zero_grad()
                loss.backward()
                self.state["optimizer"].step()
        mean = float(np.mean(losses))
        self.tracker.scalar("cfl/loss", mean, int(payload["round"]))
        self.tracker.info(f"{self.site}: CFL round {int(payload['round']) + 1}, loss {mean:.4f}")
        return {"loss": mean}

    def cfl_evaluate(self, payload: Payload) -> Payload:
        """Step: logistic regression on the encoded own training rows against the silo's own labels, and
        the LL baseline on the raw slice; test accuracy of both (numbers)."""
        tables = self.colocated.tables
        train_y = _labels_of(self.view.train_ids, tables.train_ids, tables.train_labels, self.site, "train")
        test_y = _labels_of(self.view.test_ids, tables.test_ids, tables.test_labels, self.site, "test")
        raw = {part: self.table(part) for part in ("train", "test")}
        encoder = self.state["autoencoder"].encoder.eval()
        with torch.no_grad():
            encoded = {part: encoder(x.to(self.device)).cpu().numpy() for part, x in raw.items()}
        seed = derive_seed(self.seed, "cfl_lr")
        return {
            "cfl": _lr_accuracy(encoded, train_y, test_y, seed),
            "ll": _lr_accuracy({p: x.numpy() for p, x in raw.items()}, train_y, test_y, seed),
        }


def _labels_of(ids: list[str], label_ids: list[str], labels: np.ndarray, site: str, part: str) -> np.ndarray:
    by_id = dict(zip(label_ids, labels.tolist()))
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(
            f"site '{site}': {len(missing)} of its {part} rows have no label (e.g. ID {missing[0]!r}); "
            f"in a silo space every silo labels its own rows"
        )
    return np.asarray([by_id[i] for i in ids])


def _lr_accuracy(x: dict[str, np.ndarray], train_y: np.ndarray, test_y: np.ndarray, seed: int) -> float:
    from sklearn.linear_model import LogisticRegression  # imported here: every job's processes import this module
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=seed % 2**31))
    model.fit(x["train"], train_y)
    return float(model.score(x["test"], test_y))


@register
class CFL(Algorithm):
    name = "cfl"
    job_name = "cfl"
    Config, Site = CFLConfig, CFLSite
    phases = ("local_training", "fedavg", "evaluation")
    setup = SiloSpace()

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        with net.ledger.phase("local_training"):
            widths = {s: r["width"] for s, r in net.exchange("silo_width", {s: {} for s in net.sites}).items()}
        if len(set(widths.values())) > 1:
            raise ValueError(
                f"CFL averages the silos' encoders weight by weight, so every silo needs the same number of input "
                f"columns; got {widths}. Pad the narrower slices with constant columns, or split with "
                f"`vflflare split --silo-space`, which cuts equal slices"
            )
        losses = []
        bar = Progress(self.tracker, "CFL round", self.cfg.cfl_rounds)
        for round_ in range(self.cfg.cfl_rounds):
            with net.ledger.phase("local_training"):  # train E, D on the tuple representations
                replies = net.exchange("cfl_local_training", {s: {"round": round_} for s in net.sites})
            losses.append({s: r["loss"] for s, r in replies.items()})
            bar.step(round_ + 1, "loss " + ", ".join(f"{s} {r['loss']:.4f}" for s, r in replies.items()))
            if self.cfg.cfl_fedavg:
                partial_model_aggregation(self.context(net, None), phase="fedavg")  # (w_e, w_d) up, the average down
        self.info["loss"] = losses
        with net.ledger.phase("evaluation"):  # each silo: logistic regression on its encoded rows
            scores = net.exchange("cfl_evaluate", {s: {} for s in net.sites})
        metrics = {f"{s}_test_accuracy": r["cfl"] for s, r in scores.items()}
        metrics.update({f"{s}_ll_test_accuracy": r["ll"] for s, r in scores.items()})
        metrics["test_accuracy"] = float(np.mean([r["cfl"] for r in scores.values()]))
        metrics["ll_test_accuracy"] = float(np.mean([r["ll"] for r in scores.values()]))
        return metrics

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        """One upload (the autoencoder) and one download (the average) per round; nothing else carries a
        tensor."""
        rounds = self.cfg.cfl_rounds if self.cfg.cfl_fedavg else 0
        return {s: {"uploads": rounds, "downloads": rounds} for s in sites}
