"""No raw feature leaves a site: every message a site sends in a full run of each algorithm is recorded
and checked by value against the site's own input matrix (the rows the message speaks for). Each float
array a site sends must be a representation or gradient ([rows, rep_dim]) or, from a label-owning site,
a label-side result; no column of it may track one of the site's input columns (|corr| >= 0.999 also
catches a standardised or rescaled copy; a trained ReLU representation can follow a dominant input
column to |corr| 0.991, as few-shot's did once validation became stratified, without being a copy). A toy plug-in that uploads a raw column shows the audit
catches a leak."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from vflflare.algorithms.plugin import Algorithm
from vflflare.algorithms.registry import make_config, register
from vflflare.config import SERVER
from vflflare.data.loading import load_label_tables
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.inprocess import InProcessTransport
from vflflare.protocol.payload import Payload
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.tracking import LogTracker

SITES = ["site-1", "site-2"]
PARTS = ("aligned", "unaligned", "val", "test")
FAST = {"ssl_epochs": 1, "split_epochs": 2, "split_patience": 2, "pretrain_epochs": 1, "finetune_epochs": 1,
        "classifier_epochs": 5}


class Leak(AssertionError):
    pass


class AuditedRuntime(SiteRuntime):
    """Checks every reply before it leaves the site; `checked` lists the tasks of the arrays it compared."""

    def __init__(self, site: str) -> None:
        super().__init__(site, None)
        self.checked: list[str] = []

    def handle(self, task: str, payload: Payload) -> Payload:
        reply = super().handle(task, payload)
        if task not in ("setup", "align"):  # setup: salted ID digests and counts; align: counts
            self.audit(task, payload, reply)
        return reply

    def audit(self, task: str, request: Payload, reply: Any, key: str = "") -> None:
        if isinstance(reply, dict):
            for k, v in reply.items():
                self.audit(task, request, v, k)
            return
        if isinstance(reply, (list, tuple)):
            for v in reply:
                self.audit(task, request, v, key)
            return
        if not isinstance(reply, np.ndarray) or not np.issubdtype(reply.dtype, np.floating):
            return
        where = f"site '{self.site}', task '{task}', field '{key}'"
        if task.startswith("label."):  # the label party's results (gradients, probabilities): label-side data
            assert reply.ndim <= 2 and (reply.ndim < 2 or reply.shape[1] == self.party.cfg.rep_dim), where
            return
        inputs = self.inputs_for(task, request, key)
        if inputs is None:
            raise Leak(f"{where}: a float array {reply.shape} that is no representation of known rows")
        if reply.shape != (len(inputs), self.party.cfg.rep_dim):
            raise Leak(f"{where}: shape {reply.shape}, expected ({len(inputs)}, {self.party.cfg.rep_dim})")
        for i in range(reply.shape[1]):
            for j in range(inputs.shape[1]):
                if np.std(reply[:, i]) > 0 and np.std(inputs[:, j]) > 0:
                    corr = abs(np.corrcoef(reply[:, i], inputs[:, j])[0, 1])
                    if corr >= 0.999:
                        raise Leak(f"{where}: column {i} tracks input column {j} (|corr| {corr:.4f})")
        self.checked.append(task)

    def inputs_for(self, task: str, request: Payload, key: str) -> np.ndarray | None:
        """The site's input matrix of the rows a sent array speaks for, one row per array row."""
        party = self.party
        if key in PARTS:
            batch = party.part(key)
        elif key == "h":
            batch = party.part(request.get("part", "aligned"), torch.as_tensor(np.asarray(request["rows"])))
        else:
            return None
        fields = [t.reshape(len(t), -1).double().numpy() for t in batch if torch.is_floating_point(t)]
        return np.concatenate(fields, axis=1)


def audited_run(algorithm: str, label_owner: str = SERVER, **overrides: Any) -> dict[str, AuditedRuntime]:
    cfg = make_config({"algorithm": algorithm, "label_owner": label_owner, **overrides})
    runtimes = {s: AuditedRuntime(s) for s in SITES}
    run_algorithm(InProcessTransport(runtimes), cfg, lambda: load_label_tables(SERVER, SITES, None, cfg.seed),
                  LogTracker("test.audit"))
    return runtimes


@pytest.mark.parametrize("algorithm,label_owner", [
    ("vanilla", SERVER), ("fedbcd", SERVER), ("oneshot", SERVER), ("oneshot", "site-2"),
    ("fewshot", SERVER), ("fewshot", "site-1"), ("ssvfl_i", SERVER), ("ssvfl_c", SERVER),
])  # fmt: skip
def test_no_site_sends_its_input_columns(algorithm, label_owner):
    settings = {k: v for k, v in FAST.items() if k in make_config(algorithm=algorithm).to_dict()}
    runtimes = audited_run(algorithm, label_owner, **settings)
    uploads = {"vanilla": "split", "fedbcd": "split", "ssvfl_c": "split", "oneshot": "oneshot_update",
               "fewshot": "fewshot_update", "ssvfl_i": "represent"}[algorithm]
    for runtime in runtimes.values():  # the algorithm's own uploads and the final representations were compared
        assert uploads in runtime.checked and "represent" in runtime.checked


class _Leaky(FeatureParty):
    steps = ("leak",)

    def leak(self, payload: Payload) -> Payload:
        numeric = self.part("aligned").numeric.numpy()
        reps = self.representations(["aligned"])["aligned"]
        reps[:, 0] = 3.0 * numeric[:, 0] + 1.0  # a rescaled raw column hidden in a representation
        return {"aligned": reps}


class LeakyAlgorithm(Algorithm):
    name = "leaky_audit_check"
    Site = _Leaky

    def run(self, net: Any, label: Any, rows: dict[str, int]) -> dict[str, float]:
        net.exchange("leak", {s: {} for s in net.sites})
        return {}


register(LeakyAlgorithm)


def test_the_audit_catches_a_rescaled_raw_column():
    with pytest.raises(Leak, match=r"site 'site-1', task 'leak', field 'aligned': column 0 tracks input column 0"):
        audited_run("leaky_audit_check")
