"""Issue 36, item 2: the attacks of a party that knows the code, the job's configuration (the seed included),
its own data and every message it received. Hand-made data where the outcome is known, then in-process runs
of the embedded default (breast cancer) where each attack reads only what its party received."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vflflare import cli
from vflflare.attacks import seed_replay
from vflflare.attacks.clustering import gradient_cluster_leak
from vflflare.attacks.collusion import pooled_rounds
from vflflare.attacks.gradient_norm import norm_leak
from vflflare.attacks.known_init import projection_leak, public_head_weight, public_site_weight
from vflflare.attacks.model_completion import auxiliary_rows
from vflflare.attacks.multi_pass import multi_pass_leaks
from vflflare.attacks.observed import GradientRound
from vflflare.attacks.optimal_bound import clipped_gradient_bound, gaussian_optimal_leak
from vflflare.attacks.run import GradientView, attack_run, completion_leaks, gradient_leaks
from vflflare.models.heads import MLPHead
from vflflare.privacy.defenses import defend_gradients, noisy_representations, randomized_response
from vflflare.registry import make_config
from vflflare.seeding import derive_seed, seeded_init

WIDTH = 32  # the default rep_dim: a random direction then has little in common with the head's


def old_public_head(seed: int, purpose: str, in_dim: int, num_classes: int) -> MLPHead:
    """The head as the label party built it from the public seed before defenses made it private."""
    with seeded_init(derive_seed(derive_seed(seed, "label"), purpose)):
        return MLPHead(in_dim, num_classes, 0)


def head_gradients(
    seed: int, n: int = 2000, num_classes: int = 2, sites: int = 2
) -> tuple[list[np.ndarray], np.ndarray]:
    """dCE/dH per site of the public one-shot head on random representations (site k: the k-th block)."""
    generator = torch.Generator().manual_seed(1)
    reps = [torch.randn(n, WIDTH, generator=generator).requires_grad_(True) for _ in range(sites)]
    labels = torch.randint(0, num_classes, (n,), generator=generator)
    head = old_public_head(seed, "partial_gradients", WIDTH * sites, num_classes)
    grads = torch.autograd.grad(F.cross_entropy(head(torch.cat(reps, 1)), labels), reps)
    return [g.numpy() for g in grads], labels.numpy()


def test_the_best_possible_leak_of_gaussian_noise():
    assert gaussian_optimal_leak(2, 3, 1) == pytest.approx(0.681, abs=5e-4)
    assert clipped_gradient_bound(0.0003, 3) == pytest.approx(gaussian_optimal_leak(2, 3))  # 2C apart, std zC
    assert gaussian_optimal_leak(2, 3, 4) > gaussian_optimal_leak(2, 3, 1)  # more releases, more evidence
    assert gaussian_optimal_leak(0, 3) == 0.5


def test_projection_on_the_public_head_beats_norm_scoring_and_fails_on_a_private_head():
    seed = 7
    grads, labels = head_gradients(seed)
    clip = float(np.median(np.linalg.norm(grads[0], axis=1)))
    noised = defend_gradients(torch.as_tensor(grads[0]), clip, 1.0, 1.0, torch.Generator().manual_seed(3)).numpy()
    rounds = [GradientRound(np.arange(len(labels)), noised, np.zeros(len(labels), dtype=np.int64))]
    public = public_site_weight(seed, "partial_gradients", WIDTH, 2, [0], 2, 0)
    known = projection_leak(noised, labels, public, 2)
    assert known > norm_leak(rounds, labels) + 0.15
    assert known > gradient_cluster_leak(rounds, labels, 2) + 0.05
    assert known <= clipped_gradient_bound(clip, 1.0) + 0.03  # no test beats the likelihood-ratio test
    # a head initialised from randomness the site does not hold leaves it a random direction
    private = public_site_weight(seed + 1, "partial_gradients", WIDTH, 2, [0], 2, 0)
    assert projection_leak(noised, labels, private, 2) < 0.65


def test_projection_names_more_classes_and_does_not_apply_to_a_hidden_layer():
    grads, labels = head_gradients(5, n=600, num_classes=4)
    weight = public_site_weight(5, "partial_gradients", WIDTH, 2, [1], 4, 0)
    assert projection_leak(grads[1], labels, weight, 4) == 1.0
    assert public_head_weight(5, "partial_gradients", 16, 2, hidden=8) is None
    cfg = make_config({"algorithm": "oneshot", "classifier_hidden": 8})
    view = GradientView(
        [GradientRound(np.arange(600), grads[0], np.zeros(600, dtype=np.int64))], [0], [0], 2, "oneshot_update"
    )
    leaks, notes = gradient_leaks(cfg, view, ["known_init_projection"], labels, 4, 2, 0)
    assert leaks == {"known_init_projection": None} and "hidden layer" in notes["known_init_projection"]


def noisy_passes(
    passes: int = 6, n: int = 300, noise: float = 1.0, seed: int = 0
) -> tuple[list[GradientRound], np.ndarray]:
    """Split-NN-like passes: every row's gradient is +-d with fresh noise in each pass, in a new order."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.int64)
    direction = rng.normal(size=WIDTH)
    direction /= np.linalg.norm(direction)
    rounds = []
    for _ in range(passes):
        order = rng.permutation(n)
        sign = np.where(labels[order] == 1, -1.0, 1.0)
        grads = sign[:, None] * direction + noise * rng.normal(size=(n, WIDTH))
        rounds.append(GradientRound(order, grads.astype(np.float32), np.arange(n) // 32))
    return rounds, labels


def test_votes_over_passes_beat_the_mean_single_pass_cluster_leak():
    rounds, labels = noisy_passes()
    single = gradient_cluster_leak(rounds, labels, 2)
    pooled = multi_pass_leaks(rounds, labels, 2)
    assert single < 0.9
    assert pooled["multi_pass_clusters"] > single + 0.1
    assert set(pooled) == {"multi_pass_norm", "multi_pass_direction", "multi_pass_clusters"}
    assert multi_pass_leaks(rounds[:1], labels, 2) == {}  # one pass: nothing to pool


def test_colluding_sites_pool_each_rows_gradients_side_by_side():
    rounds, labels = noisy_passes(passes=2)
    other, _ = noisy_passes(passes=2, seed=0)  # the other site: the same rows in the same batches
    pooled = pooled_rounds([rounds, other])
    assert pooled[0].grads.shape == (300, 2 * WIDTH)
    assert np.array_equal(pooled[1].grads[:, :WIDTH], rounds[1].grads)
    with pytest.raises(ValueError, match="different numbers of passes"):
        pooled_rounds([rounds, other[:1]])


def test_seed_replay_removes_the_old_public_gradient_noise_exactly():
    seed, clip, noise, sites = 11, 0.5, 3.0, 3
    generator = seed_replay.label_stream(seed, "gradient-defense:batches")  # the old LabelParty.to_sites stream
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(rows, WIDTH)).astype(np.float32) for rows in (32, 32, 16)]
    received = []  # what the second site without labels got: one call per batch, every site's draw in order
    for batch in batches:
        sent = [defend_gradients(torch.as_tensor(batch), clip, noise, 1.0, generator) for _ in range(sites)]
        received.append(sent[1].numpy())
    rounds = [GradientRound(np.arange(80), np.concatenate(received), np.repeat([0, 1, 2], [32, 32, 16]))]
    replayed = seed_replay.replay_gradient_noise(seed, seed_replay.calls_of(rounds), WIDTH, 1, sites, noise * clip)
    clean = seed_replay.cleaned_rounds(rounds, replayed)[0].grads
    clipped = np.concatenate([defend_gradients(torch.as_tensor(b), clip, 0.0, 1.0, generator).numpy() for b in batches])
    assert np.abs(clean - clipped).max() < 1e-5
    assert seed_replay.gradient_replay_blocker(clip, noise, 1.0, 4.0, 0.0, 1).startswith("not replayable")


@pytest.mark.parametrize("num_classes", [2, 4])
def test_seed_replay_undoes_old_public_randomized_response(num_classes):
    labels = torch.as_tensor(np.random.default_rng(1).integers(0, num_classes, 500))
    noised = randomized_response(labels, num_classes, 0.5, seed_replay.label_stream(3, "label-dp"))
    assert (noised != labels).float().mean() > 0.2
    kept, shift = seed_replay.replay_response_coins(3, 500, num_classes, 0.5)
    assert np.array_equal(seed_replay.invert_response(noised.numpy(), kept, shift, num_classes), labels.numpy())
    if num_classes == 2:  # k-means names the noised labels up to a flip, which the inversion commutes with
        flipped = seed_replay.invert_response(1 - noised.numpy(), kept, shift, 2)
        assert np.array_equal(flipped, 1 - labels.numpy())


def test_seed_replay_removes_old_public_representation_noise():
    generator = torch.Generator().manual_seed(derive_seed(derive_seed(4, "site-2"), "rep-noise"))  # position 1
    clean = [torch.randn(rows, WIDTH) for rows in (100, 30, 200)]
    uploads = [noisy_representations(c, 2.0, generator).numpy() for c in clean]
    noise = seed_replay.replay_representation_noise(4, 1, [u.shape for u in uploads])
    recovered = seed_replay.remove_representation_noise(uploads[2], noise[2])
    assert np.abs(uploads[2] - clean[2].numpy()).mean() > 1.0
    assert np.abs(recovered - clean[2].numpy()).mean() < 0.1


def test_auxiliary_rows_are_stratified_and_never_miss_a_class():
    labels = np.array([0] * 150 + [1] * 8)
    rows = auxiliary_rows(labels, 40, np.random.default_rng(0))
    assert len(rows) == len(np.unique(rows)) == 40
    assert set(labels[rows]) == {0, 1} and (labels[rows] == 1).sum() == 2  # 8/158 of 40, rounded
    short = auxiliary_rows(np.array([0] * 100 + [1]), 40, np.random.default_rng(0))
    assert (np.array([0] * 100 + [1])[short] == 1).sum() == 1  # a short class gives the rows it has
    assert len(auxiliary_rows(labels, 500, np.random.default_rng(0))) == len(labels)


class OneColumnSite:
    """A site whose representations and input columns are its label plus noise."""

    seed = 0

    def __init__(self, aligned: np.ndarray, test: np.ndarray) -> None:
        rng = np.random.default_rng(0)
        self.reps = {
            part: (y[:, None] + rng.normal(size=(len(y), 3))).astype(np.float32)
            for part, y in (("aligned", aligned), ("test", test))
        }

    def own_representations(self, part: str) -> np.ndarray:
        return self.reps[part]

    def part(self, part: str) -> tuple[torch.Tensor]:
        return (torch.as_tensor(self.reps[part]),)


def test_model_completion_when_the_first_aligned_rows_are_one_class():
    aligned, test = np.array([0] * 250 + [1] * 30), np.array([0, 1] * 50)
    leaks, notes = completion_leaks(OneColumnSite(aligned, test), aligned, test)
    assert leaks["model_completion_40"] > 0.8 and leaks["model_completion_200_own_columns"] > 0.8
    assert notes == {}
    one_class = np.zeros(280, dtype=np.int64)
    leaks, notes = completion_leaks(OneColumnSite(one_class, test), one_class, test)
    assert leaks["model_completion_40"] is None and "1 class(es)" in notes["model_completion_40"]


FAST = {"ssl_epochs": 2, "classifier_epochs": 20}
# the attacks on what a site received; model completion reads its own model and is reported beside its prior
LABEL_LEAKS = ("gradient_norm", "gradient_direction", "gradient_clusters", "known_init_projection")


def test_three_sites_collude_and_strongest_is_the_maximum_over_label_attacks():
    result = attack_run(make_config({"algorithm": "oneshot", **FAST}), ["site-1", "site-2", "site-3"], None)
    leak = result["leak"]
    assert set(LABEL_LEAKS) <= set(leak)
    assert leak["strongest"] == max(leak[k] for k in LABEL_LEAKS)
    assert all(
        leak["strongest"] >= v
        for k, v in leak.items()
        if v is not None and not k.startswith(("feature", "model_completion"))
    )
    assert {"model_completion_40", "model_completion_200_own_columns"} <= set(leak)
    assert leak["known_init_projection"] == 1.0  # no defense: the head is the public one
    coalition = result["leak_by_site"]["colluding sites"]
    assert {"gradient_norm", "gradient_clusters", "known_init_projection"} <= set(coalition)
    assert leak["colluding_sites"] == max(v for v in coalition.values() if v is not None)
    assert "optimal_leak_bound" not in result  # no noise, no bound


def test_split_nn_gets_multi_pass_attacks_and_the_bound_over_its_passes(monkeypatch):
    monkeypatch.setenv("VFLFLARE_PRIVATE_SEED", "36")  # the defense's private draws, repeatable
    cfg = make_config(
        {"algorithm": "vanilla", "split_epochs": 3, "split_patience": 3, "gradient_clip": 0.0003, "gradient_noise": 3.0}
    )
    result = attack_run(cfg, ["site-1", "site-2"], None)
    leak, passes = result["leak"], 3
    assert {
        "multi_pass_norm",
        "multi_pass_direction",
        "multi_pass_clusters",
        "known_init_projection",
        "seed_replay_gradients",
    } <= set(leak)
    assert "colluding sites" not in result["leak_by_site"]  # two sites: no coalition without the other
    assert result["optimal_leak_bound"] == pytest.approx(gaussian_optimal_leak(2, 3, passes))
    # private noise: replaying the public stream removes nothing
    assert leak["seed_replay_gradients"] < 0.9


def test_attack_command_json_carries_every_figure_of_the_table(capsys, monkeypatch):
    monkeypatch.setenv("VFLFLARE_PRIVATE_SEED", "36")
    code = cli.main(
        [
            "attack",
            "--algorithm",
            "oneshot",
            "--set",
            "ssl_epochs=1",
            "--set",
            "classifier_epochs=10",
            "--set",
            "gradient_clip=0.003",
            "--set",
            "gradient_noise=3",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["optimal_leak_bound"] == pytest.approx(0.681, abs=5e-4)
    assert out["privacy"]["dp"]["streams"]["gradients"]["epsilon"] == pytest.approx(2.753, abs=0.01)
    assert set(out["gradient_norm_median"]) == {"site-1", "site-2"}
    assert {"strongest", "known_init_projection", "seed_replay_gradients"} <= set(out["leak"])
    # the head and noise are private now: the public-seed attacks do no better than the best possible test
    assert out["leak"]["seed_replay_gradients"] < 0.9
