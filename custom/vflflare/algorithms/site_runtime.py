"""Everything a site does on request: one entry point, `handle(task, payload)`, used alike by the
NVFlare executor (tasks and aux messages) and by the in-process driver."""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from vflflare.algorithms.alignment import hash_ids
from vflflare.algorithms.feature_party import FeatureParty
from vflflare.algorithms.label_party import LabelParty
from vflflare.algorithms.payload import Payload
from vflflare.config import VFLConfig
from vflflare.data.loading import load_label_tables, load_site_tables
from vflflare.tracking import LogTracker, Tracker

LABEL_PREFIX = "label."


class SiteRuntime:
    def __init__(self, site: str, data_root: str | None, tracker: Tracker | None = None) -> None:
        self.site = site
        self.data_root = data_root
        self.tracker = tracker or LogTracker(f"vflflare.{site}")
        self.party: FeatureParty | None = None
        self.label: LabelParty | None = None
        self.fp16 = False
        self._lock = threading.Lock()  # tasks and aux messages may arrive on different threads
        self._tasks: dict[str, Callable[[Payload], Payload]] = {
            "setup": self._setup,
            "align": self._align,
            "represent": self._represent,
            "oneshot_update": self._oneshot_update,
            "fewshot_update": self._fewshot_update,
            "split": self._split,
            "commit": lambda p: self._call(self.party.commit_candidate),
            "restore": lambda p: self._call(self.party.restore_best),
        }

    def handle(self, task: str, payload: Payload) -> Payload:
        with self._lock:
            if task.startswith(LABEL_PREFIX):
                return self._label_call(task[len(LABEL_PREFIX):], payload)
            if task not in self._tasks:
                raise ValueError(f"site '{self.site}': unknown task '{task}'")
            if task != "setup" and self.party is None:
                raise RuntimeError(f"site '{self.site}': task '{task}' before setup")
            return self._tasks[task](payload)

    @staticmethod
    def _call(method: Callable[[], Any]) -> Payload:
        method()
        return {}

    def _setup(self, payload: Payload) -> Payload:
        cfg = VFLConfig.from_dict(payload["config"])
        self.fp16 = cfg.fp16
        torch.set_num_threads(cfg.num_threads)
        sites, salt = list(payload["sites"]), payload["salt"]
        tables = load_site_tables(self.site, sites, self.data_root, cfg.seed)
        self.party = FeatureParty(self.site, tables, cfg, self.tracker)
        reply: Payload = {"train_ids": hash_ids(tables.train_ids, salt), "test_ids": hash_ids(tables.test_ids, salt)}
        if cfg.label_owner == self.site:
            labels = load_label_tables(self.site, sites, self.data_root, cfg.seed)
            self.label = LabelParty(labels, sites, cfg, self.tracker)
            reply["label"] = {
                "train_ids": hash_ids(labels.train_ids, salt),
                "test_ids": hash_ids(labels.test_ids, salt),
                "num_classes": labels.num_classes,
            }
        return reply

    def _align(self, payload: Payload) -> Payload:
        self.party.align(payload["train"], payload["val"], payload["test"])
        if "label" in payload:
            rows = payload["label"]
            self.label.align(rows["train"], rows["val"], rows["test"])
        return {}

    def _represent(self, payload: Payload) -> Payload:
        if payload.get("keep_candidate"):
            self.party.keep_candidate()
        return self.party.represent(list(payload["parts"]))

    def _oneshot_update(self, payload: Payload) -> Payload:
        self.party.oneshot_update(payload["grads"], int(payload["num_classes"]))
        return self.party.represent(list(payload["represent"]))

    def _fewshot_update(self, payload: Payload) -> Payload:
        self.party.fewshot_update(payload["probs"])
        return self.party.represent(list(payload["represent"]))

    def _split(self, payload: Payload) -> Payload:
        """One pipelined split-NN step: apply the previous batch's gradient, then forward the next batch."""
        if "grad" in payload:
            self.party.split_backward(payload["grad"])
        if "rows" in payload:
            return {"h": self.party.split_forward(payload.get("part", "aligned"), payload["rows"])}
        return {}

    def _label_call(self, method: str, payload: Payload) -> Payload:
        if self.label is None:
            raise RuntimeError(f"site '{self.site}' is not the label owner but got label call '{method}'")
        if method not in LABEL_METHODS:
            raise ValueError(f"site '{self.site}': unknown label call '{method}'")
        return {"result": getattr(self.label, method)(*payload.get("args", []))}


# Label-party methods a coordinator may call on a label-owning site, and the channel each uses:
# per-batch and per-epoch calls go over the step (aux) channel, phase calls over tasks.
LABEL_METHODS = {
    "partial_gradients": "exchange",
    "infer_probabilities": "exchange",
    "fit_classifier": "exchange",
    "split_begin": "step",
    "split_step": "step",
    "evaluate": "step",
    "keep_candidate": "step",
    "commit_candidate": "step",
    "restore_best": "step",
}
