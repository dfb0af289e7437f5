"""`vflflare attack`: one algorithm run in process with the job's defenses, then every attack that applies
to it, each on what one honest-but-curious party received in that run (attacks/observed.py) and its
own state: a site without labels attacks the labels, the label party attacks each site's columns.

The attacker is the one DESIGN.md's Conventions name: it knows the code, the whole job configuration (the
seed included), its own data and state and every message it received in the whole job. So beside the
single-message attacks run the adaptive ones: the public head's projection (known_init.py), evidence pooled
over every pass (multi_pass.py), the defenses' public draws replayed (seed_replay.py), and, with K >= 3,
the sites without labels colluding (collusion.py). Each algorithm's leak is the maximum over every label
attack ('strongest'), printed beside the best any test can reach against its Gaussian gradient noise
('optimal_leak_bound', optimal_bound.py).

Labels the attacks are scored against come from the split's label files (the aligned and test rows), and
for few-shot's unaligned rows from `unaligned_labels` when the caller has them (a benchmark on a public
table does; a user's own split does not, and that attack is then left out, said so in the result)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vflflare.attacks import (
    clustering,
    collusion,
    feature_reconstruction,
    gradient_direction,
    gradient_norm,
    known_init,
    model_completion,
    multi_pass,
    seed_replay,
)
from vflflare.attacks.clustering import clusters_of, gradient_cluster_leak, probability_leak, recovered
from vflflare.attacks.feature_reconstruction import reconstruction_r2
from vflflare.attacks.gradient_direction import direction_leak
from vflflare.attacks.gradient_norm import norm_leak, norm_scores
from vflflare.attacks.leak import majority_rate
from vflflare.attacks.model_completion import auxiliary_rows, model_completion_attack
from vflflare.attacks.multi_pass import multi_pass_leaks
from vflflare.attacks.observed import (
    GradientRound,
    received_gradients,
    received_probabilities,
    uploaded_representations,
)
from vflflare.attacks.optimal_bound import clipped_gradient_bound
from vflflare.config import SERVER, JobConfig
from vflflare.data.loading import load_label_tables
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.inprocess import InProcessTransport
from vflflare.protocol.recording import Message, RecordingTransport, load_messages
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.protocol.topology import COORDINATOR, check_job_sites
from vflflare.protocol.views import job_data_request
from vflflare.registry import get_algorithm
from vflflare.seeding import derive_seed
from vflflare.torch_runtime import prepare_torch
from vflflare.tracking import LogTracker

AUX_ROWS = (40, 200)  # the labels a site is assumed to know for model completion, drawn stratified by class


# each label attack: the channel it reads, as its module declares it (None: the site's own model), and
# whether it needs binary labels
LABEL_ATTACKS: dict[str, tuple[str | None, bool]] = {
    "gradient_norm": (gradient_norm.CHANNEL, gradient_norm.BINARY_ONLY),
    "gradient_direction": (gradient_direction.CHANNEL, gradient_direction.BINARY_ONLY),
    **{name: (channel, False) for name, channel in clustering.CHANNELS.items()},
    "known_init_projection": (known_init.CHANNEL, known_init.BINARY_ONLY),
    **{name: (multi_pass.CHANNEL, binary_only) for name, binary_only in multi_pass.ATTACKS.items()},
    "seed_replay_gradients": (seed_replay.CHANNEL, False),
    "seed_replay_label_dp": (seed_replay.CHANNEL, False),
    **{f"model_completion_{a}": (model_completion.CHANNEL, False) for a in AUX_ROWS},
}
# the attacks that replay a defense's draws, listed only when that defense is on
REPLAYED_SETTING = {"seed_replay_gradients": "gradient_noise", "seed_replay_label_dp": "label_dp_epsilon"}


def label_attacks(cfg: JobConfig, num_classes: int) -> list[str]:
    """The label attacks that apply to the algorithm's channels (cfg.privacy_channels), its labels and the
    defenses it runs (a seed replay needs its defense on). A run whose sites received a single pass of
    gradients then leaves the multi-pass attacks out."""
    return [
        name
        for name, (channel, binary_only) in LABEL_ATTACKS.items()
        if (channel is None or channel in cfg.privacy_channels)
        and (num_classes == 2 or not binary_only)
        and (name not in REPLAYED_SETTING or getattr(cfg, REPLAYED_SETTING[name]) > 0)
    ]


def _labels_of(ids: list[str], rows: torch.Tensor, by_id: dict[str, int]) -> np.ndarray:
    return np.asarray([by_id[ids[i]] for i in rows.tolist()], dtype=np.int64)


@dataclass
class GradientView:
    """The gradients one attacker holds: one site's passes, or colluding sites' side by side. `positions`:
    its sites' places in the job's site list (their columns of the head); `defended`: their places among the
    sites without labels (the order of the label party's defense draws), of `num_defended`; `first_task`: the
    task that brought the first pass, whose fresh head it names."""

    rounds: list[GradientRound]
    positions: list[int]
    defended: list[int]
    num_defended: int
    first_task: str | None


def first_gradient_task(messages: list[Message], site: str) -> str | None:
    return next((m.task for m in messages if m.site == site and ("grads" in m.request or "grad" in m.request)), None)


def gradient_view(
    cfg: JobConfig,
    sites: list[str],
    attackers: list[str],
    rounds: dict[str, list[GradientRound]],
    messages: list[Message],
) -> GradientView:
    defended = [s for s in sites if s != cfg.label_owner]
    pooled = rounds[attackers[0]] if len(attackers) == 1 else collusion.pooled_rounds([rounds[s] for s in attackers])
    return GradientView(
        pooled,
        [sites.index(s) for s in attackers],
        [defended.index(s) for s in attackers],
        len(defended),
        first_gradient_task(messages, attackers[0]),
    )


def gradient_leaks(
    cfg: JobConfig,
    view: GradientView,
    names: list[str],
    labels: np.ndarray,
    num_classes: int,
    num_sites: int,
    seed: int,
) -> tuple[dict[str, float | None], dict[str, str]]:
    """Every gradient attack of `names` on one view (scored against the aligned rows' `labels`), and a note
    for each that could not run, saying why."""
    rounds, out, notes = view.rounds, {}, {}
    names = [
        n for n in names if LABEL_ATTACKS[n][0] == "gradients" and (n not in multi_pass.ATTACKS or len(rounds) > 1)
    ]
    if not rounds:
        return dict.fromkeys(names), dict.fromkeys(names, "the site received no gradients")
    weight = _public_weight(cfg, view, num_sites, num_classes, notes) if "known_init_projection" in names else None
    cleaned = _replayed_rounds(cfg, view, notes) if REPLAYED_SETTING.keys() & set(names) else None
    pooled = multi_pass_leaks(rounds, labels, num_classes, seed) if multi_pass.ATTACKS.keys() & set(names) else {}
    for name in names:
        if name == "gradient_norm":
            out[name] = norm_leak(rounds, labels)
        elif name == "gradient_direction":
            out[name] = direction_leak(rounds, labels)
        elif name == "gradient_clusters":
            out[name] = gradient_cluster_leak(rounds, labels, num_classes, seed)
        elif name == "known_init_projection":
            first = rounds[0]
            out[name] = (
                None
                if weight is None
                else known_init.projection_leak(first.grads, labels[first.positions], weight, num_classes)
            )
        elif name in multi_pass.ATTACKS:
            out[name] = pooled[name]
        elif name == "seed_replay_gradients":
            out[name] = None if cleaned is None else strongest_single_pass(cleaned, labels, num_classes, seed)
        elif name == "seed_replay_label_dp":
            out[name] = _label_dp_replay(cfg, view, cleaned or rounds, labels, num_classes, num_sites, seed, notes)
    return out, {k: v for k, v in notes.items() if k in out}


def strongest_single_pass(rounds: list[GradientRound], labels: np.ndarray, num_classes: int, seed: int) -> float:
    """The best of the single-pass attacks (norm, direction, clusters) on these rounds."""
    leaks = [gradient_cluster_leak(rounds, labels, num_classes, seed)]
    if num_classes == 2:
        leaks += [norm_leak(rounds, labels), direction_leak(rounds, labels)]
    return max(leaks)


def _public_weight(
    cfg: JobConfig, view: GradientView, num_sites: int, num_classes: int, notes: dict[str, str]
) -> np.ndarray | None:
    """The public head's columns of the view's sites, as it was before the first pass; None (with a note)
    where there is none to re-create."""
    purpose = {"oneshot_update": known_init.ONESHOT_PURPOSE, "split": known_init.SPLIT_PURPOSE}.get(view.first_task)
    if purpose is None:
        notes["known_init_projection"] = f"no fresh head behind the first gradients (task {view.first_task!r})"
        return None
    weight = known_init.public_site_weight(
        cfg.seed, purpose, cfg.representation_width, num_sites, view.positions, num_classes, cfg.classifier_hidden
    )
    if weight is None:
        notes["known_init_projection"] = "does not apply: the head has a hidden layer (classifier_hidden > 0)"
    return weight


def _replayed_rounds(cfg: JobConfig, view: GradientView, notes: dict[str, str]) -> list[GradientRound] | None:
    """The view's rounds less the gradient noise replayed from the public stream; None (with a note) where the
    defense is not a replayable clip + noise."""
    blocker = seed_replay.gradient_replay_blocker(
        cfg.gradient_clip,
        cfg.gradient_noise,
        cfg.gradient_keep,
        cfg.gradient_marvell,
        getattr(cfg, "iso_gradients", 0.0),
        getattr(cfg, "batches_per_step", 1),
    )
    if blocker is not None:
        notes["seed_replay_gradients"] = blocker
        return None
    calls = seed_replay.calls_of(view.rounds)
    noise = np.concatenate(
        [
            seed_replay.replay_gradient_noise(
                cfg.seed,
                calls,
                cfg.representation_width,
                index,
                view.num_defended,
                cfg.gradient_noise * cfg.gradient_clip,
            )
            for index in view.defended
        ],
        axis=1,
    )
    return seed_replay.cleaned_rounds(view.rounds, noise)


def _label_dp_replay(
    cfg: JobConfig,
    view: GradientView,
    rounds: list[GradientRound],
    labels: np.ndarray,
    num_classes: int,
    num_sites: int,
    seed: int,
    notes: dict[str, str],
) -> float | None:
    """Randomized response undone with the replayed coins, the noised labels read off one-shot's gradients
    (k-means for two classes, the renaming being a global flip the inversion commutes with; for more classes
    the public head names them)."""
    if view.first_task != "oneshot_update":
        notes["seed_replay_label_dp"] = "not attempted: needs one-shot's single gradient message over all aligned rows"
        return None
    first = rounds[0]
    if num_classes == 2:
        noised = clusters_of(first.grads, 2, seed)
    else:
        weight = _public_weight(cfg, view, num_sites, num_classes, {})
        if weight is None:
            notes["seed_replay_label_dp"] = (
                "not attempted: more than two classes need the public linear head to name them"
            )
            return None
        noised = known_init.decoded_labels(first.grads, weight)
    kept, shift = seed_replay.replay_response_coins(cfg.seed, len(labels), num_classes, cfg.label_dp_epsilon)
    truth = seed_replay.invert_response(noised, kept[first.positions], shift[first.positions], num_classes)
    return recovered(truth, labels[first.positions], num_classes)


def completion_leaks(
    party: FeatureParty, aligned: np.ndarray, test: np.ndarray
) -> tuple[dict[str, float | None], dict[str, str]]:
    """Model completion with AUX_ROWS auxiliary rows drawn by the site's own generator, stratified by class,
    on its federated bottom model and (`_own_columns`, its prior) on its raw input columns."""
    rng = np.random.default_rng(derive_seed(party.seed, "model-completion-aux"))
    own = {part: party.own_representations(part) for part in ("aligned", "test")}
    raw = {part: input_columns(party, part) for part in ("aligned", "test")}
    out, notes = {}, {}
    for count in AUX_ROWS:
        name = f"model_completion_{count}"
        if len(np.unique(aligned)) < 2:
            out[name] = out[f"{name}_own_columns"] = None
            notes[name] = f"the aligned rows hold {len(np.unique(aligned))} class(es): no auxiliary rows of 2 classes"
            continue
        rows = auxiliary_rows(aligned, count, rng)
        out[name] = completion_leak(own["aligned"][rows], aligned[rows], own["test"], test, party.seed)
        # the site's prior: the same head on its own input columns, which it holds without any federation
        out[f"{name}_own_columns"] = completion_leak(raw["aligned"][rows], aligned[rows], raw["test"], test, party.seed)
    return out, notes


def site_leaks(
    cfg: JobConfig,
    party: FeatureParty,
    messages: list,
    view: GradientView,
    num_classes: int,
    labels: dict[str, dict[str, int]],
    unaligned_labels: dict[str, int] | None,
    num_sites: int,
) -> tuple[dict[str, float | None], dict[str, str]]:
    """Every label attack of one site without labels (`view`: the gradients it received); None where the
    truth to score it is missing or the attack could not run (the notes say why)."""
    site_view = party.view
    aligned = _labels_of(site_view.train_ids, party.rows_of("aligned"), labels["train"])
    test = _labels_of(site_view.test_ids, party.rows_of("test"), labels["test"])
    names = label_attacks(cfg, num_classes)
    out, notes = gradient_leaks(cfg, view, names, aligned, num_classes, num_sites, party.seed)
    if "probability_clusters" in names:
        probs = received_probabilities(messages, party.site)
        rows = party.rows_of("unaligned")
        known = unaligned_labels is not None and all(site_view.train_ids[i] in unaligned_labels for i in rows.tolist())
        out["probability_clusters"] = (
            probability_leak(probs, _labels_of(site_view.train_ids, rows, unaligned_labels), num_classes)
            if known and probs is not None
            else None
        )
    if any(name.startswith("model_completion_") for name in names):
        completion, completion_notes = completion_leaks(party, aligned, test)
        out.update(completion)
        notes.update(completion_notes)
    return out, notes


def completion_leak(aux: np.ndarray, aux_labels: np.ndarray, rows: np.ndarray, labels: np.ndarray, seed: int) -> float:
    scored = model_completion_attack(aux, aux_labels, rows, labels, seed)
    return max(scored["auc"], 1 - scored["auc"]) if "auc" in scored else scored["accuracy"]


def input_columns(party: FeatureParty, part: str, floats_only: bool = False) -> np.ndarray:
    """A part's rows as the site's model reads them, one column per input value (categorical indices as numbers,
    or left out with floats_only)."""
    return np.concatenate(
        [
            t.reshape(len(t), -1).double().numpy()
            for t in party.part(part)
            if torch.is_floating_point(t) or not floats_only
        ],
        1,
    )


def _r2_summary(reps: np.ndarray, columns: np.ndarray) -> dict[str, Any]:
    r2 = reconstruction_r2(reps, columns)
    return {
        "r2_median": float(np.median(r2)),
        "r2_max": float(r2.max()),
        "columns": len(r2),
        "r2": [round(float(v), 4) for v in r2],
    }


def reconstruction(party: FeatureParty, messages: list) -> dict[str, Any] | None:
    """What the label party reconstructs of one site's input columns from its uploaded test representations."""
    reps = uploaded_representations(messages, party.site, "test")
    if reps is None:
        return None
    return _r2_summary(reps, input_columns(party, "test", floats_only=True))


def replayed_reconstruction(
    cfg: JobConfig, party: FeatureParty, position: int, messages: list
) -> tuple[dict[str, Any] | None, str | None]:
    """Feature reconstruction from the last uploaded test representations less the site's representation
    noise replayed from its public stream; None and why where the site's draw order is not replayed."""
    uploads, blocker = seed_replay.noised_uploads(messages, party.site)
    tests = [i for i, (key, _) in enumerate(uploads) if key.endswith(":test")]
    if blocker is not None or not tests:
        return None, blocker or "no test representations uploaded"
    noise = seed_replay.replay_representation_noise(cfg.seed, position, [array.shape for _, array in uploads])
    cleaned = seed_replay.remove_representation_noise(uploads[tests[-1]][1], noise[tests[-1]])
    return _r2_summary(cleaned, input_columns(party, "test", floats_only=True)), None


def strongest(leak: dict[str, Any]) -> float | None:
    """Each algorithm's leak: the maximum over every label attack on what the party received (gradients,
    probabilities). Model completion reads the site's own model, which its own columns already give it as much
    as (the `_own_columns` prior), so it is reported beside its prior, not in this maximum."""
    values = [v for k, v in leak.items() if v is not None and LABEL_ATTACKS.get(k, (None,))[0] is not None]
    return max(values, default=None)


def attack_run(
    cfg: JobConfig, sites: list[str], data_root: str, unaligned_labels: dict[str, int] | None = None
) -> dict[str, Any]:
    """The job's result record plus 'leak' (per attack, the worst over the parties it targets; 'strongest',
    the maximum over the label attacks; 'colluding_sites', the strongest of K >= 3 sites pooled),
    'leak_by_site' (with collusion.NAME for the coalition), 'attack_notes' (per party, why an attack did not
    run), 'majority' (the majority-class rate of the aligned and test rows), 'gradient_norm_median' (per site
    that received gradients) and, with gradient noise, 'optimal_leak_bound' (the AUC of the best possible
    test on one site's gradients over every pass it received; 'optimal_leak_bound_colluding' for the coalition)."""
    check_job_sites(COORDINATOR, sites, cfg.sites, 2, data_root)
    prepare_torch(cfg.num_threads)
    runtimes = {s: SiteRuntime(s, data_root) for s in sites}
    net = RecordingTransport(InProcessTransport(runtimes, cfg.wire_dtype))
    result = run_algorithm(
        net,
        cfg,
        lambda: load_label_tables(SERVER, job_data_request(sites, data_root, cfg)),
        LogTracker("vflflare.server"),
    )
    return attack(cfg, sites, data_root, runtimes, net.messages, result, unaligned_labels)


def attack_simulated(
    cfg: JobConfig, sites: list[str], data_root: str, workspace: str, unaligned_labels: dict[str, int] | None = None
) -> dict[str, Any]:
    """As attack_run, on a run of the NVFlare simulator: its coordinator records every message it relays (all
    that each party received), and each site keeps its trained bottom model (model_store.py). Each attacker's
    own state is then rebuilt here from its data (the same alignment: it is a function of the data and the
    seed) and the model its site saved; the attacks read the recorded messages."""
    from vflflare.jobs import write_job
    from vflflare.protocol.checkpoint import runs_root
    from vflflare.protocol.model_store import load_site_model, models_dir
    from vflflare.protocol.setup import SetupInputs
    from vflflare.simulation import simulate

    if cfg.he:
        raise ValueError("vflflare attack --env sim reads the messages in plaintext: run it without he")
    job = write_job(
        Path(workspace) / "jobs", f"{cfg.algorithm}_attack", cfg.to_dict(), min_sites=len(sites), record_messages=True
    )
    # the simulator's console on stderr: stdout is the attack's report (--json)
    result = simulate(
        str(job),
        str(Path(workspace) / "ws"),
        len(sites),
        len(sites),
        data_root,
        sites=sites,
        verbose=False,
        console=sys.stderr,
    )
    if "error" in result:
        raise RuntimeError(f"the simulated job failed: {result['error']}")
    messages = load_messages(Path(result["results_path"]).parent / result["messages"])
    runtimes = {s: SiteRuntime(s, data_root) for s in sites}
    plugin = get_algorithm(cfg.algorithm, cfg.plugins)
    plugin.setup.coordinator(
        SetupInputs(
            InProcessTransport(runtimes, cfg.wire_dtype),
            cfg,
            plugin.Label,
            lambda: load_label_tables(SERVER, job_data_request(sites, data_root, cfg)),
            LogTracker("vflflare.server"),
        )
    )
    for site, runtime in runtimes.items():
        folder = models_dir(runs_root(data_root, site), result.get("model_id") or result["job_id"]) / site
        runtime.party.state["encoder"] = load_site_model(folder, site)[0].to(runtime.party.device)
    return attack(cfg, sites, data_root, runtimes, messages, result, unaligned_labels)


def attack(
    cfg: JobConfig,
    sites: list[str],
    data_root: str | None,
    runtimes: dict[str, SiteRuntime],
    messages: list[Message],
    result: dict[str, Any],
    unaligned_labels: dict[str, int] | None,
) -> dict[str, Any]:
    """Every attack on a finished run: `messages` are what the parties received, `runtimes` the attackers' own
    state (data, alignment, trained bottom models), `result` the run's record."""
    plugin = get_algorithm(cfg.algorithm, cfg.plugins)
    owner = cfg.label_owner if cfg.label_owner in sites else SERVER
    request = job_data_request(sites, data_root, cfg)
    tables = load_label_tables(owner, request, active_site_labels=plugin.setup.active_site_labels)
    labels = {
        "train": dict(zip(tables.train_ids, tables.train_labels.tolist())),
        "test": dict(zip(tables.test_ids, tables.test_labels.tolist())),
    }
    attacked = [s for s in sites if s != cfg.label_owner]
    by_site: dict[str, dict[str, Any]] = {}
    notes: dict[str, dict[str, str]] = {}
    rounds = {site: received_gradients(messages, site) for site in attacked}
    for site in attacked:
        party = runtimes[site].party
        view = gradient_view(cfg, sites, [site], rounds, messages)
        by_site[site], notes[site] = site_leaks(
            cfg, party, messages, view, tables.num_classes, labels, unaligned_labels, len(sites)
        )
        if feature_reconstruction.CHANNEL in cfg.privacy_channels:
            by_site[site]["feature_reconstruction"] = reconstruction(party, messages)
            if cfg.representation_noise > 0:
                replayed, why = replayed_reconstruction(cfg, party, sites.index(site), messages)
                by_site[site]["feature_reconstruction_seed_replay"] = replayed
                if why:
                    notes[site]["feature_reconstruction_seed_replay"] = why
    leak: dict[str, Any] = {}
    for name in dict.fromkeys(k for s in attacked for k in by_site[s]):
        values = [by_site[s][name] for s in attacked if by_site[s].get(name) is not None]
        if name.startswith("feature_reconstruction"):
            leak[name] = max((v["r2_median"] for v in values), default=None)
        else:
            leak[name] = max(values, default=None)
    leak["strongest"] = strongest(leak)
    party = runtimes[attacked[0]].party
    aligned = _labels_of(party.view.train_ids, party.rows_of("aligned"), labels["train"])
    coalition = len(sites) >= 3 and len(attacked) >= 2 and all(rounds[s] for s in attacked)
    if coalition:
        view = gradient_view(cfg, sites, attacked, rounds, messages)
        by_site[collusion.NAME], notes[collusion.NAME] = gradient_leaks(
            cfg, view, label_attacks(cfg, tables.num_classes), aligned, tables.num_classes, len(sites), party.seed
        )
        leak["colluding_sites"] = strongest(by_site[collusion.NAME])
    majority = {
        part: majority_rate(_labels_of(ids, party.rows_of(part), labels[table]))
        for part, ids, table in (("aligned", party.view.train_ids, "train"), ("test", party.view.test_ids, "test"))
    }
    # per site, the median norm of the gradients it received: the scale a gradient_clip is chosen against
    norms = {
        s: float(np.median(np.concatenate([norm_scores(r.grads) for r in rounds[s]]))) for s in attacked if rounds[s]
    }
    out = {
        **result,
        "leak": leak,
        "leak_by_site": by_site,
        "attack_notes": {k: v for k, v in notes.items() if v},
        "majority": majority,
        "gradient_norm_median": norms,
    }
    passes = [len(rounds[s]) for s in attacked if rounds[s]]
    # the noise the label party used: gradient_noise, or the one gradient_dp_epsilon set (privacy/accounting.py)
    noise = result.get("privacy", {}).get("dp", {}).get("streams", {}).get("gradients", {}).get("noise_multiplier", 0)
    if noise > 0 and passes:
        # each pass is one independent release of every row's gradient to the site
        out["optimal_leak_bound"] = clipped_gradient_bound(cfg.gradient_clip, noise, max(passes))
        if coalition:
            out["optimal_leak_bound_colluding"] = clipped_gradient_bound(
                cfg.gradient_clip, noise, max(passes) * len(attacked)
            )
    return out


LEAK_COLUMNS = (
    "gradient_norm",
    "gradient_direction",
    "gradient_clusters",
    "probability_clusters",
    "known_init_projection",
    "multi_pass_norm",
    "multi_pass_direction",
    "multi_pass_clusters",
    "seed_replay_gradients",
    "seed_replay_label_dp",
    "model_completion_40",
    "model_completion_200",
    "model_completion_200_own_columns",
    "strongest",
    "optimal_leak_bound",
    "colluding_sites",
    "feature_reconstruction",
    "feature_reconstruction_seed_replay",
)


def leak_figures(result: dict[str, Any]) -> dict[str, float | None]:
    """The figures of the table's leak columns (optimal_leak_bound from the result, the rest from 'leak')."""
    return {
        **result["leak"],
        **({"optimal_leak_bound": result["optimal_leak_bound"]} if "optimal_leak_bound" in result else {}),
    }


def leak_table(results: list[dict[str, Any]]) -> str:
    """One Markdown row per attacked run: test metric, each attack's leak ('-' where it does not apply,
    'n/a' where its truth is missing or it could not run), payload MB per site."""
    head = ["algorithm", "defenses", "test metric", *LEAK_COLUMNS, "MB per site"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        test = next(
            (f"{k.removeprefix('test_')} {v:.4f}" for k, v in r["metrics"].items() if k.startswith("test_")), "-"
        )
        figures = leak_figures(r)
        leaks = [
            "-" if k not in figures else "n/a" if figures[k] is None else f"{figures[k]:.3f}" for k in LEAK_COLUMNS
        ]
        sites = r["communication"]["per_site"]
        mb = max(v["payload_bytes"] for v in sites.values()) / 1e6
        defenses = ", ".join(f"{k}={v:g}" for k, v in r["defenses"].items()) or "none"
        lines.append("| " + " | ".join([r["algorithm"], defenses, test, *leaks, f"{mb:.2f}"]) + " |")
    return "\n".join(lines)
