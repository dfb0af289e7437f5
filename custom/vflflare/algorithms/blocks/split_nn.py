"""The split-NN block: vanilla VFL, FedBCD (local_steps = Q), SS-VFL-C and the few-shot "+finetune"
rounds all train this way. Its three parts:

- `SplitNNSite`: a site's forward of a batch and backward of the gradient it gets for it;
- `SplitNNLabel`: the label party's head, loss and gradients per batch, and evaluation;
- `train_split_nn`: the coordinator's loop over the per-batch channel. One round trip per batch: each
  request carries the previous batch's gradient and the next batch's rows, each reply the next
  batch's representations. With `batches_per_step` m > 1, one round trip per m batches: the sites
  forward m batches at once and get their m gradients in the next request, so a site's later batches
  of a group go forward before the earlier ones' updates (gradients up to m - 1 steps stale).
  Early stopping on the validation metric, every party keeping its best weights as a candidate.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vflflare.algorithms.blocks.representations import reps_of
from vflflare.config import Settings
from vflflare.privacy.iso import iso
from vflflare.protocol.checkpoint import CheckpointedTransport
from vflflare.protocol.going_alone import keep_comparison
from vflflare.protocol.payload import Payload
from vflflare.protocol.run_context import RunContext
from vflflare.protocol.transport import Transport
from vflflare.seeding import derive_seed
from vflflare.tracking import Progress


@dataclass
class SplitNNSettings(Settings):
    split_epochs: int = 100  # at most this many passes over the aligned labeled rows (early stopping ends it sooner)
    split_patience: int = 20  # paper: stop baselines after 20 rounds without improvement
    local_steps: int = 1  # FedBCD Q (paper: 5); 1 = vanilla VFL
    # after every epoch also score the test rows, for learning curves (TensorBoard split/test_*) and
    # communication-to-target tables; their representations are counted in ledger phase "test_curve",
    # never as training traffic. Off by default: it costs one extra upload per epoch.
    test_curve: bool = False
    # with checkpoint: true, a save point every this many epochs (and after the last): a run stopped
    # inside split-NN training resumes from the last one
    split_checkpoint_every: int = 5
    # ISO (FedHSSL Eq. 7) strength lambda_f on the gradients the label party sends to the parties that do
    # not own the labels (every site when the coordinator holds them); 0 = off
    iso_gradients: float = 0.0
    # batches per split-NN round trip: m > 1 sends m batches' rows (and gradients) per message, for
    # links where a round trip costs more than a batch's compute; 1 = one batch per round trip (the papers')
    batches_per_step: int = 1

    privacy_channels = frozenset({"representations", "gradients"})  # dL/dH to every site without labels
    bounds = {
        "split_epochs": (1, None),
        "split_patience": (1, None),
        "local_steps": (1, None),  # Settings.validate
        "split_checkpoint_every": (1, None),
        "iso_gradients": (0, None),
        "batches_per_step": (1, None),
    }

    @property
    def gradient_passes(self) -> int:
        return self.split_epochs

    def validate(self) -> None:
        super().validate()


def _batches(value: Any) -> list:
    """A split request's rows or gradients: one batch's array, or a list of them (batches_per_step > 1)."""
    return value if isinstance(value, list) else [value]


class SplitNNSite:
    """Site half (mixed into a FeatureParty). Each forward's graph waits in `_pending`, oldest first, for
    its gradient: transient, not phase state."""

    steps = ("split", "commit", "restore")
    _pending: list[tuple[Any, torch.Tensor]] | None = None

    def split(self, payload: Payload) -> Payload:
        """Step: apply the previous batches' gradients, then forward the next batches."""
        if "grad" in payload:
            self.split_backward(payload["grad"])
        if "rows" not in payload:
            return {}
        h = [self.split_forward(payload.get("part", "aligned"), rows) for rows in _batches(payload["rows"])]
        return {"h": h if isinstance(payload["rows"], list) else h[0]}

    def represent(self, payload: Payload) -> Payload:
        if payload.get("keep_candidate"):
            self.state["candidate"] = copy.deepcopy(self.encoder.state_dict())
        return super().represent(payload)

    def commit(self, payload: Payload) -> Payload:
        self.state["best"] = self.state["candidate"]
        return {}

    def restore(self, payload: Payload) -> Payload:
        self.encoder.load_state_dict(self.state["best"])
        return {}

    def split_forward(self, part: str, rows: np.ndarray) -> np.ndarray:
        """Training-mode forward of positions `rows` within `part`; keeps the graph for split_backward."""
        batch = self.part(part, torch.as_tensor(np.asarray(rows, dtype=np.int64)))
        if "split_optimizer" not in self.state:
            self.state["split_optimizer"] = torch.optim.Adam(
                self.encoder.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay
            )
        self.encoder.train()
        out = self.encode(batch)
        self._pending = (self._pending or []) + [(batch, out)]
        return self.to_upload(out.detach()).cpu().numpy().astype(np.float32)

    def split_backward(self, grads: np.ndarray | list[np.ndarray]) -> None:
        """Apply dL/dH to the oldest waiting forwards, in order. Every forward's parameter gradients are
        taken before any update, as its graph holds the weights it ran with (batches_per_step > 1 makes
        the later ones stale). With cfg.local_steps = Q > 1 (FedBCD) Q-1 more steps per batch re-use its
        stale gradient on fresh forwards of the same rows."""
        optimizer = self.state["split_optimizer"]
        params = [p for group in optimizer.param_groups for p in group["params"]]
        staged = []
        for grad in _batches(grads):
            if not self._pending:
                raise RuntimeError(f"{self.site}: split_backward without a preceding split_forward")
            batch, out = self._pending.pop(0)
            grad_t = torch.as_tensor(np.asarray(grad, dtype=np.float32), device=out.device)
            if grad_t.shape != out.shape:
                raise ValueError(
                    f"{self.site}: gradient shape {tuple(grad_t.shape)} != representations {tuple(out.shape)}"
                )
            optimizer.zero_grad()
            out.backward(grad_t)
            staged.append((batch, grad_t, [p.grad for p in params]))
        for batch, grad_t, first in staged:
            for step in range(self.cfg.local_steps):
                optimizer.zero_grad()
                if step == 0:
                    for param, param_grad in zip(params, first):
                        param.grad = param_grad
                else:
                    self.encode(batch).backward(grad_t)
                penalty = self.split_penalty()
                if penalty is not None:
                    penalty.backward()
                optimizer.step()

    def split_penalty(self) -> torch.Tensor | None:
        """A local term added to this site's split-NN loss (VFLHLP's constraint); none by default."""
        return None


class SplitNNLabel:
    """Label half (mixed into a LabelParty)."""

    channels = {
        "split_begin": "step", "split_step": "step", "split_steps": "step", "keep_candidate": "step",
        "commit_candidate": "step", "restore_best": "step",
    }  # fmt: skip

    def split_begin(self, keep_classifier: bool) -> None:
        """Start split-NN training: fresh f_c (vanilla) or keep the trained one (finetune)."""
        if keep_classifier and "classifier" not in self.state:
            raise RuntimeError("label party: split_begin(keep_classifier=True) needs a fitted classifier")
        if not keep_classifier:
            # every site's encoder outputs cfg.representation_width, so the input width is known before any batch
            self.state["classifier"] = self.new_head(
                self.cfg.representation_width * len(self.sites), "split_classifier", sends_gradients=True
            )
        self.state["split_optimizer"] = torch.optim.Adam(
            self.state["classifier"].parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay
        )
        self.state.pop("candidate")
        self.state.pop("best")

    def split_step(self, rows: np.ndarray, reps: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
        """Forward f_c on the batch (positions within the aligned rows), loss, update f_c (Q times with
        FedBCD), return dL/dH per site and the loss."""
        if "split_optimizer" not in self.state:
            raise RuntimeError("label party: split_step before split_begin")
        classifier, optimizer = self.state["classifier"], self.state["split_optimizer"]
        labels = self.part_labels("aligned")[torch.as_tensor(np.asarray(rows, dtype=np.int64))]
        for site in self.sites:
            self.check_finite(site, "split-NN batch", reps[site])
        per_site = [torch.as_tensor(np.asarray(reps[s], dtype=np.float32)).requires_grad_(True) for s in self.sites]
        classifier.train()
        loss = F.cross_entropy(classifier(torch.cat(per_site, dim=1)), labels)
        optimizer.zero_grad()
        self._with_penalty(loss, classifier).backward()
        optimizer.step()
        stale = torch.cat([h.detach() for h in per_site], dim=1)
        for _ in range(self.cfg.local_steps - 1):
            optimizer.zero_grad()
            self._with_penalty(F.cross_entropy(classifier(stale), labels), classifier).backward()
            optimizer.step()
        grads = self.to_sites({s: h.grad for s, h in zip(self.sites, per_site)}, labels, "trained")
        if self.cfg.iso_gradients > 0:
            if "iso_generator" not in self.state:
                self.state["iso_generator"] = self.private.generator("iso")
            grads = {
                s: g if s == self.cfg.label_owner else iso(g, self.cfg.iso_gradients, self.state["iso_generator"])
                for s, g in grads.items()
            }
        return {s: g.numpy().astype(np.float32) for s, g in grads.items()}, loss.item()

    def split_steps(
        self, rows: list[np.ndarray], reps: list[dict[str, np.ndarray]]
    ) -> list[tuple[dict[str, np.ndarray], float]]:
        """split_step on each batch of a group in order: one call (one relay to a label site) per round trip."""
        return [self.split_step(r, h) for r, h in zip(rows, reps)]

    def split_penalty(self, classifier: torch.nn.Module) -> torch.Tensor | None:
        """A term added to the head's split-NN loss (VFLHLP's constraint); none by default."""
        return None

    def _with_penalty(self, loss: torch.Tensor, classifier: torch.nn.Module) -> torch.Tensor:
        penalty = self.split_penalty(classifier)
        return loss if penalty is None else loss + penalty

    def keep_candidate(self) -> None:
        self.state["candidate"] = copy.deepcopy(self.state["classifier"].state_dict())

    def commit_candidate(self) -> None:
        self.state["best"] = self.state["candidate"]

    def restore_best(self) -> None:
        self.state["classifier"].load_state_dict(self.state["best"])


def _train_epoch(net: Transport, label: Any, order: np.ndarray, batch_size: int, per_step: int) -> float:
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]

    def message(values: list) -> Any:  # one batch travels as its array, as the papers' protocol has it
        return values if per_step > 1 else values[0]

    pending: dict[str, list[np.ndarray]] = {}
    losses = []
    for first in range(0, len(batches), per_step):
        group = batches[first : first + per_step]
        with net.ledger.timed_step():
            replies = net.step(
                "split",
                {s: {"rows": message(group), **({"grad": message(pending[s])} if pending else {})} for s in net.sites},
            )
        reps = [{s: _batches(reply["h"])[i] for s, reply in replies.items()} for i in range(len(group))]
        results = label.split_steps(group, reps) if per_step > 1 else [label.split_step(group[0], reps[0])]
        pending = {s: [grads[s] for grads, _ in results] for s in net.sites}
        losses += [float(loss) for _, loss in results]
    net.step("split", {s: {"grad": message(pending[s])} for s in net.sites})
    return float(np.mean(losses))


def _validate(net: Transport, label: Any) -> tuple[str, float]:
    """Validation metric of the current weights, which every party keeps as its candidate best."""
    label.keep_candidate()
    val_reps = net.step("represent", {s: {"parts": ["val"], "keep_candidate": True} for s in net.sites})
    ((metric, score),) = label.evaluate("val", reps_of(val_reps, "val")).items()
    return metric, score


def _commit(net: Transport, label: Any) -> None:
    label.commit_candidate()
    net.step("commit", {s: {} for s in net.sites})


def _test_curve_point(net: Transport, label: Any, epoch: int) -> dict[str, float]:
    """Test metric of the current weights and the training payload spent so far. The test
    representations travel in their own ledger phase, so they never count as training traffic."""
    spent = net.ledger.per_phase[net.ledger.current]["payload_bytes"]  # the training phase this runs in
    with net.ledger.phase("test_curve"):
        replies = net.step("represent", {s: {"parts": ["test"]} for s in net.sites})
        scored = label.evaluate("test", reps_of(replies, "test"))  # a relay to a label-owning site counts here too
    return {"epoch": epoch + 1, "training_payload_bytes": spent, **scored}


def _save_point(
    net: Transport,
    label: Any,
    cfg: SplitNNSettings,
    progress: dict[str, Any],
    rng: np.random.Generator,
    info: dict[str, Any],
    last: bool,
) -> None:
    """Every cfg.split_checkpoint_every epochs and after the last one, in a checkpointed run."""
    if isinstance(net, CheckpointedTransport) and (last or progress["epochs_run"] % cfg.split_checkpoint_every == 0):
        loop = {**progress, "rng": rng.bit_generator.state, "test_curve": info.get("test_curve", [])}
        net.save_point("split_training", loop, getattr(label, "state", None))


def _resume_point(net: Transport, label: Any, rng: np.random.Generator, info: dict[str, Any]) -> dict[str, Any] | None:
    saved = (
        net.resume_point("split_training", getattr(label, "state", None))
        if isinstance(net, CheckpointedTransport)
        else None
    )
    if saved is None:
        return None
    rng.bit_generator.state = saved.pop("rng")
    if saved["test_curve"]:
        info["test_curve"] = saved["test_curve"]
    return saved


def train_split_nn(
    ctx: RunContext, n_rows: int, *, epochs: int, keep_classifier: bool = False, phase: str = "split_training"
) -> dict[str, float]:
    """Split-NN training on the `n_rows` aligned training rows (ctx.cfg: SplitNNSettings) for up to `epochs`
    epochs, from a fresh f_c, or from the label party's own with keep_classifier (finetuning). Early stopping
    on the validation metric; returns 'val_*' and 'test_*' of the best state. Writes the number of epochs run
    to ctx.info['split_epochs'] and, with cfg.test_curve, the per-epoch test metric against training payload
    to ctx.info['test_curve']. A checkpointed run saves its progress every cfg.split_checkpoint_every epochs
    and goes on from there when resumed."""
    net, label, cfg, tracker, info = ctx.net, ctx.label, ctx.cfg, ctx.tracker, ctx.info
    rng = np.random.default_rng(derive_seed(cfg.seed, "split-order"))
    with net.ledger.phase(phase):
        progress = _resume_point(net, label, rng, info)
        if progress is None:
            progress = {"epochs_run": 0, "best": -math.inf, "since_best": 0, "metric": "", "stopped": False}
            label.split_begin(keep_classifier)
            if keep_classifier:
                # finetuning must beat the model it starts from: on credit default its first epoch at lr 0.01
                # can be worse on validation than the few-shot model, and would otherwise be kept
                _, progress["best"] = _validate(net, label)
                _commit(net, label)
        bar = Progress(tracker, "split-NN epoch", epochs, first=progress["epochs_run"], early_stop=True)
        while not progress["stopped"] and progress["epochs_run"] < epochs:
            epoch = progress["epochs_run"]
            loss = _train_epoch(net, label, rng.permutation(n_rows), cfg.batch_size, cfg.batches_per_step)
            metric, score = _validate(net, label)
            tracker.scalar("split/train_loss", loss, epoch)
            tracker.scalar(f"split/{metric}", score, epoch)
            if cfg.test_curve:
                point = _test_curve_point(net, label, epoch)
                info.setdefault("test_curve", []).append(point)
                test_metric = "test_" + metric.removeprefix("val_")
                tracker.scalar(f"split/{test_metric}", point[test_metric], epoch)
            if score > progress["best"]:
                progress.update(best=score, since_best=0)
                _commit(net, label)
            else:
                progress["since_best"] += 1
                progress["stopped"] = progress["since_best"] >= cfg.split_patience
            progress.update(epochs_run=epoch + 1, metric=metric)
            bar.step(epoch + 1, f"train loss {loss:.4f}, {metric} {score:.4f}")
            _save_point(net, label, cfg, progress, rng, info, last=progress["stopped"] or epoch + 1 == epochs)
        tracker.info(
            f"split-NN stopped after {progress['epochs_run']} epochs, best {progress['metric']} {progress['best']:.4f}"
        )
    with net.ledger.phase("evaluation"):
        label.restore_best()
        net.step("restore", {s: {} for s in net.sites})
        replies = net.exchange("represent", {s: {"parts": ["val", "test"]} for s in net.sites})
        metrics = {
            **label.evaluate("val", reps_of(replies, "val")),
            **label.evaluate("test", reps_of(replies, "test"), True),
        }
    keep_comparison(info, metrics)
    info["split_epochs"] = progress["epochs_run"]
    return metrics


def split_nn_communications(
    cfg: SplitNNSettings, n_rows: int, epochs: int, finetune: bool
) -> tuple[tuple[int, int], tuple[int, int]]:
    """What one `train_split_nn` run of `epochs` epochs costs: ((uploads, downloads) of every site,
    (uploads, downloads) more for the site that hosts the label party).

    Per epoch: one upload per round trip of batches_per_step batches (their representations) and one
    download per round trip (their gradients), plus the validation upload; test_curve adds one test upload per epoch;
    the final evaluation one
    upload; finetuning one validation upload before the first epoch. A label-owning site also gets
    every batch's representations (one download) and returns the gradients (one upload), and gets the
    representations of every evaluation: per epoch, plus test_curve's, plus val and test at the end."""
    batches = math.ceil(math.ceil(n_rows / cfg.batch_size) / cfg.batches_per_step)  # round trips per epoch
    curve = epochs if cfg.test_curve else 0
    feature = (epochs * (batches + 1) + 1 + int(finetune) + curve, epochs * batches)
    label_extra = (epochs * batches, epochs * batches + epochs + 2 + int(finetune) + curve)
    return feature, label_extra
