"""Issue 36: every draw that protects data comes from randomness only the defending party holds. A party that
holds the job's configuration (seed included) replays what the code would draw from it, and its "cleaned"
gradients, labels and representations come out no closer to the truth than what it received."""

from __future__ import annotations

import json

import pytest
import torch
from flare_fakes import FakeContext

from vflflare.flare.site_config import local_private_seed, read_site_config
from vflflare.models.heads import MLPHead
from vflflare.privacy import defenses
from vflflare.privacy.private_randomness import LOCAL_SEED, OS_ENTROPY, PRIVATE_SEED_ENV, PrivateRandomness
from vflflare.protocol import feature_party, label_party
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config
from vflflare.seeding import derive_seed, seeded_init

SITES = ["site-1", "site-2"]
SEED = 0


def public_generators(name: str, purpose: str) -> list[torch.Generator]:
    """What a party can derive for a stream from public information: the job seed, the party's seed from it
    (as every other draw of the job is derived), with and without the purpose."""
    party_seed = derive_seed(SEED, name)
    seeds = [
        SEED,
        party_seed,
        derive_seed(party_seed, purpose),
        derive_seed(party_seed, f"{purpose}:batches"),
        derive_seed(SEED, purpose),
    ]
    return [torch.Generator().manual_seed(s) for s in seeds]


def recorded(monkeypatch, module, name: str) -> list:
    calls = []
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append((args, out))
        return out

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_replaying_the_public_seed_does_not_remove_gradient_noise(monkeypatch):
    monkeypatch.delenv(PRIVATE_SEED_ENV, raising=False)
    clip, noise = 0.01, 1.0
    calls = recorded(monkeypatch, label_party, "defend_gradients")
    run_inprocess(
        make_config({"algorithm": "oneshot", "ssl_epochs": 1, "gradient_clip": clip, "gradient_noise": noise}),
        SITES,
        None,
    )
    assert len(calls) == 2  # one-shot: one gradient message per site
    for generator in public_generators("label", "gradient-defense"):
        for (grads, *_), received in calls:  # the order the label party defends them in
            true = defenses.clip_rows(grads, clip)
            cleaned = received - noise * clip * torch.randn(received.shape, generator=generator, dtype=received.dtype)
            noised_error = (received - true).norm()
            # independent noise: the replay adds its own, about sqrt(2) x the error; a true replay gives 0
            assert (cleaned - true).norm() > 1.2 * noised_error


def test_replaying_the_public_seed_does_not_invert_randomized_response(monkeypatch):
    monkeypatch.delenv(PRIVATE_SEED_ENV, raising=False)
    calls = recorded(monkeypatch, label_party, "randomized_response")
    run_inprocess(make_config({"algorithm": "oneshot", "ssl_epochs": 1, "label_dp_epsilon": 1.0}), SITES, None)
    (true, num_classes, epsilon, _), noised = calls[0][0], calls[0][1]
    noised_accuracy = float((noised == true).float().mean())
    keep = defenses.keep_probability(1.0, 2)  # the coins are OS entropy: allow 4.5 binomial standard deviations
    assert noised_accuracy == pytest.approx(keep, abs=4.5 * (keep * (1 - keep) / len(true)) ** 0.5)
    for generator in public_generators("label", "label-dp"):
        replayed = defenses.randomized_response(true, num_classes, epsilon, generator)
        flipped = replayed != true  # the coins the attacker believes were drawn, inverted
        inverted = torch.where(flipped, 1 - noised, noised)
        assert float((inverted == true).float().mean()) < noised_accuracy


def test_replaying_the_public_seed_does_not_remove_representation_noise(monkeypatch):
    monkeypatch.delenv(PRIVATE_SEED_ENV, raising=False)
    calls = recorded(monkeypatch, feature_party, "noisy_representations")
    run_inprocess(make_config({"algorithm": "oneshot", "ssl_epochs": 1, "representation_noise": 1.0}), SITES, None)
    assert calls
    for (reps, strength, _), uploaded in calls[:4]:
        rms = float(reps.pow(2).mean().sqrt())
        for generator in public_generators("site-1", "rep-noise"):
            cleaned = uploaded - strength * rms * torch.randn(reps.shape, generator=generator)
            assert (cleaned - reps).norm() > 1.2 * (uploaded - reps).norm()


def test_a_defended_heads_initialisation_is_private(monkeypatch):
    """With clipping alone every one-shot gradient row of a linear head lies on the head's direction for the
    site (W[1] - W[0] on its columns); re-created from the public seed, that direction misses the rows."""
    monkeypatch.delenv(PRIVATE_SEED_ENV, raising=False)
    calls = recorded(monkeypatch, label_party, "defend_gradients")
    cfg = make_config({"algorithm": "oneshot", "ssl_epochs": 1, "gradient_clip": 1.0})
    run_inprocess(cfg, SITES, None)
    with seeded_init(derive_seed(derive_seed(SEED, "label"), "partial_gradients")):
        public = MLPHead(cfg.rep_dim * len(SITES), 2, 0)
    weight = next(public.parameters()).detach()
    for position, ((grads, *_), _) in enumerate(calls):
        direction = (weight[1] - weight[0])[position * cfg.rep_dim : (position + 1) * cfg.rep_dim]
        rows = grads.reshape(len(grads), -1)
        own = rows[rows.norm(dim=1).argmax()]  # the true direction, up to sign
        assert (rows @ own).abs().div(rows.norm(dim=1) * own.norm()).min() > 0.999
        cosine = (rows @ direction).abs().div(rows.norm(dim=1) * direction.norm())
        assert cosine.max() < 0.9


def test_defenses_repeat_only_under_a_private_seed(monkeypatch):
    cfg = make_config({"algorithm": "oneshot", "ssl_epochs": 1, "gradient_clip": 0.01, "gradient_noise": 1.0})
    calls = recorded(monkeypatch, label_party, "defend_gradients")

    def sent() -> tuple[dict, torch.Tensor]:  # one more run, and what its sites received
        calls.clear()
        result = run_inprocess(cfg, SITES, None)
        return result, torch.cat([out for _, out in calls])

    monkeypatch.delenv(PRIVATE_SEED_ENV, raising=False)
    assert not torch.equal(sent()[1], sent()[1])  # the OS's entropy
    monkeypatch.setenv(PRIVATE_SEED_ENV, "bench-7")
    seeded = [sent() for _ in range(2)]
    assert torch.equal(seeded[0][1], seeded[1][1])
    seeded = [result for result, _ in seeded]
    assert seeded[0]["metrics"] == seeded[1]["metrics"]
    assert seeded[0]["privacy"]["private_randomness"] == {p: LOCAL_SEED for p in ("server", *SITES)}
    assert "bench-7" not in json.dumps(seeded[0])
    # undefended: no private draw at all, the job seed alone decides
    plain = make_config({"algorithm": "oneshot", "ssl_epochs": 1})
    monkeypatch.delenv(PRIVATE_SEED_ENV)
    assert run_inprocess(plain, SITES, None)["metrics"] == run_inprocess(plain, SITES, None)["metrics"]
    assert "privacy" not in run_inprocess(plain, SITES, None)


def test_private_streams_are_per_party_and_purpose():
    a, b = PrivateRandomness("label", "s"), PrivateRandomness("site-1", "s")
    assert a.seed("x") == PrivateRandomness("label", "s").seed("x")
    assert len({a.seed("x"), a.seed("y"), b.seed("x")}) == 3
    assert PrivateRandomness("label").seed("x") != PrivateRandomness("label").seed("x")
    assert PrivateRandomness("label").source == OS_ENTROPY
    assert a.record() == {"source": LOCAL_SEED, "purposes": ["x", "y"]}


def test_a_sites_private_seed_comes_from_its_local_config(tmp_path):
    assert local_private_seed(FakeContext(tmp_path), "site-1") is None
    (tmp_path / "vflflare.json").write_text(json.dumps({"data_root": "/d", "private_seed": 1234}))
    assert local_private_seed(FakeContext(tmp_path), "site-1") == "1234"
    assert read_site_config(tmp_path / "vflflare.json", "site 'site-1'")["data_root"] == "/d"
    (tmp_path / "vflflare.json").write_text(json.dumps({"private_seed": [1]}))
    with pytest.raises(ValueError, match="private_seed"):
        local_private_seed(FakeContext(tmp_path), "site-1")


def test_marvell_is_deterministic_given_its_private_seed():
    grads = torch.randn(64, 8, generator=torch.Generator().manual_seed(3))
    labels = (torch.arange(64) % 4 == 0).long()
    draws = [
        defenses.defend_gradients(grads, 0.0, 0.0, 1.0, PrivateRandomness("label", "k").generator("g"), 2.0, labels)
        for _ in range(2)
    ]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], grads)
