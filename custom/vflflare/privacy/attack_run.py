"""`vflflare attack`: one algorithm run in process with the job's defenses, then every attack that applies
to it, each on what one honest-but-curious party received in that run (privacy/attacks/observed.py) and its
own state: a site without labels attacks the labels, the label party attacks each site's columns.

Labels the attacks are scored against come from the split's label files (the aligned and test rows), and
for few-shot's unaligned rows from `unaligned_labels` when the caller has them (a benchmark on a public
table does; a user's own split does not, and that attack is then left out, said so in the result)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vflflare.algorithms.registry import get_algorithm
from vflflare.config import SERVER, JobConfig
from vflflare.data.loading import load_label_tables
from vflflare.privacy.attacks import clustering, feature_reconstruction, gradient_direction, gradient_norm, model_completion
from vflflare.privacy.attacks.clustering import gradient_cluster_leak, probability_leak
from vflflare.privacy.attacks.feature_reconstruction import reconstruction_r2
from vflflare.privacy.attacks.gradient_direction import direction_leak
from vflflare.privacy.attacks.gradient_norm import norm_leak, norm_scores
from vflflare.privacy.attacks.leak import majority_rate
from vflflare.privacy.attacks.model_completion import model_completion_attack
from vflflare.privacy.attacks.observed import (
    RecordingTransport, received_gradients, received_probabilities, uploaded_representations,
)
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.inprocess import InProcessTransport
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.protocol.topology import COORDINATOR, check_job_sites
from vflflare.torch_runtime import prepare_torch
from vflflare.tracking import LogTracker

AUX_ROWS = (40, 200)  # the labels a site is assumed to know for model completion


# each label attack: the channel it reads, as its module declares it (None: the site's own model), and
# whether it needs binary labels
LABEL_ATTACKS: dict[str, tuple[str | None, bool]] = {
    "gradient_norm": (gradient_norm.CHANNEL, gradient_norm.BINARY_ONLY),
    "gradient_direction": (gradient_direction.CHANNEL, gradient_direction.BINARY_ONLY),
    **{name: (channel, False) for name, channel in clustering.CHANNELS.items()},
    **{f"model_completion_{a}": (model_completion.CHANNEL, False) for a in AUX_ROWS},
}


def label_attacks(cfg: JobConfig, num_classes: int) -> list[str]:
    """The label attacks that apply to the algorithm's channels (cfg.privacy_channels) and its labels."""
    return [name for name, (channel, binary_only) in LABEL_ATTACKS.items()
            if (channel is None or channel in cfg.privacy_channels) and (num_classes == 2 or not binary_only)]


def _labels_of(ids: list[str], rows: torch.Tensor, by_id: dict[str, int]) -> np.ndarray:
    return np.asarray([by_id[ids[i]] for i in rows.tolist()], dtype=np.int64)


def site_leaks(cfg: JobConfig, party: FeatureParty, messages: list, rounds: list, num_classes: int,
               labels: dict[str, dict[str, int]], unaligned_labels: dict[str, int] | None) -> dict[str, float | None]:
    """Every label attack of one site without labels (`rounds`: the gradients it received); None where the
    truth to score it is missing."""
    view = party.view
    aligned = _labels_of(view.train_ids, party.rows_of("aligned"), labels["train"])
    test = _labels_of(view.test_ids, party.rows_of("test"), labels["test"])
    out: dict[str, float | None] = {}
    for name in label_attacks(cfg, num_classes):
        if name == "gradient_norm":
            out[name] = norm_leak(rounds, aligned)
        elif name == "gradient_direction":
            out[name] = direction_leak(rounds, aligned)
        elif name == "gradient_clusters":
            out[name] = gradient_cluster_leak(rounds, aligned, num_classes, party.seed)
        elif name == "probability_clusters":
            probs = received_probabilities(messages, party.site)
            rows = party.rows_of("unaligned")
            known = unaligned_labels is not None and all(view.train_ids[i] in unaligned_labels for i in rows.tolist())
            out[name] = probability_leak(probs, _labels_of(view.train_ids, rows, unaligned_labels), num_classes) \
                if known and probs is not None else None
        else:
            aux = int(name.rsplit("_", 1)[1])
            own = {part: party.own_representations(part) for part in ("aligned", "test")}
            out[name] = completion_leak(own["aligned"][:aux], aligned[:aux], own["test"], test, party.seed)
            # the site's prior: the same head on its own input columns, which it holds without any federation
            raw = {part: input_columns(party, part) for part in ("aligned", "test")}
            out[f"{name}_own_columns"] = completion_leak(raw["aligned"][:aux], aligned[:aux], raw["test"], test, party.seed)
    return out


def completion_leak(aux: np.ndarray, aux_labels: np.ndarray, rows: np.ndarray, labels: np.ndarray, seed: int) -> float:
    scored = model_completion_attack(aux, aux_labels, rows, labels, seed)
    return max(scored["auc"], 1 - scored["auc"]) if "auc" in scored else scored["accuracy"]


def input_columns(party: FeatureParty, part: str, floats_only: bool = False) -> np.ndarray:
    """A part's rows as the site's model reads them, one column per input value (categorical indices as numbers,
    or left out with floats_only)."""
    return np.concatenate([t.reshape(len(t), -1).double().numpy() for t in party.part(part)
                           if torch.is_floating_point(t) or not floats_only], 1)


def reconstruction(party: FeatureParty, messages: list) -> dict[str, Any] | None:
    """What the label party reconstructs of one site's input columns from its uploaded test representations."""
    reps = uploaded_representations(messages, party.site, "test")
    if reps is None:
        return None
    r2 = reconstruction_r2(reps, input_columns(party, "test", floats_only=True))
    return {"r2_median": float(np.median(r2)), "r2_max": float(r2.max()), "columns": len(r2),
            "r2": [round(float(v), 4) for v in r2]}


def attack_run(cfg: JobConfig, sites: list[str], data_root: str,
               unaligned_labels: dict[str, int] | None = None) -> dict[str, Any]:
    """The job's result record plus 'leak' (per attack, the worst over the parties it targets),
    'leak_by_site', 'majority' (the majority-class rate of the aligned and test rows) and
    'gradient_norm_median' (per site that received gradients)."""
    check_job_sites(COORDINATOR, sites, cfg.sites, 2, data_root)
    prepare_torch(cfg.num_threads)
    plugin = get_algorithm(cfg.algorithm, cfg.plugins)
    runtimes = {s: SiteRuntime(s, data_root) for s in sites}
    net = RecordingTransport(InProcessTransport(runtimes, cfg.wire_dtype))
    owner = cfg.label_owner if cfg.label_owner in sites else SERVER
    tables = load_label_tables(owner, sites, data_root, cfg.seed, cfg.id_normalize, plugin.uses_active_site_labels)
    result = run_algorithm(net, cfg, lambda: load_label_tables(SERVER, sites, data_root, cfg.seed, cfg.id_normalize),
                           LogTracker("vflflare.server"))
    labels = {"train": dict(zip(tables.train_ids, tables.train_labels.tolist())),
              "test": dict(zip(tables.test_ids, tables.test_labels.tolist()))}
    attacked = [s for s in sites if s != cfg.label_owner]
    by_site: dict[str, dict[str, Any]] = {}
    rounds = {site: received_gradients(net.messages, site) for site in attacked}
    for site in attacked:
        party = runtimes[site].party
        by_site[site] = site_leaks(cfg, party, net.messages, rounds[site], tables.num_classes, labels, unaligned_labels)
        if feature_reconstruction.CHANNEL in cfg.privacy_channels:
            by_site[site]["feature_reconstruction"] = reconstruction(party, net.messages)
    leak: dict[str, Any] = {}
    for name in by_site[attacked[0]]:
        values = [by_site[s][name] for s in attacked if by_site[s][name] is not None]
        if name == "feature_reconstruction":
            leak[name] = max((v["r2_median"] for v in values), default=None)
        else:
            leak[name] = max(values, default=None)
    party = runtimes[attacked[0]].party
    majority = {part: majority_rate(_labels_of(ids, party.rows_of(part), labels[table]))
                for part, ids, table in (("aligned", party.view.train_ids, "train"), ("test", party.view.test_ids, "test"))}
    # per site, the median norm of the gradients it received: the scale a gradient_clip is chosen against
    norms = {s: float(np.median(np.concatenate([norm_scores(r.grads) for r in rounds[s]]))) for s in attacked if rounds[s]}
    return {**result, "leak": leak, "leak_by_site": by_site, "majority": majority, "gradient_norm_median": norms}


LEAK_COLUMNS = ("gradient_norm", "gradient_direction", "gradient_clusters", "probability_clusters",
                "model_completion_40", "model_completion_200", "model_completion_200_own_columns", "feature_reconstruction")


def leak_table(results: list[dict[str, Any]]) -> str:
    """One Markdown row per attacked run: test metric, each attack's leak ('-' where it does not apply,
    'n/a' where its truth is missing), payload MB per site."""
    head = ["algorithm", "defenses", "test metric", *LEAK_COLUMNS, "MB per site"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        test = next((f"{k.removeprefix('test_')} {v:.4f}" for k, v in r["metrics"].items() if k.startswith("test_")), "-")
        leaks = ["-" if k not in r["leak"] else "n/a" if r["leak"][k] is None else f"{r['leak'][k]:.3f}" for k in LEAK_COLUMNS]
        sites = r["communication"]["per_site"]
        mb = max(v["payload_bytes"] for v in sites.values()) / 1e6
        defenses = ", ".join(f"{k}={v:g}" for k, v in r["defenses"].items()) or "none"
        lines.append("| " + " | ".join([r["algorithm"], defenses, test, *leaks, f"{mb:.2f}"]) + " |")
    return "\n".join(lines)
