import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_breast_cancer
from torch import nn

from vflflare.models.tabular import TabularEncoder
from vflflare.ssl.augment import ScarfCorruption, TabularBatch, TwoViews
from vflflare.ssl.losses import (
    BYOL_MOMENTUM,
    BYOLLoss,
    MoCoLoss,
    NTXentLoss,
    SimSiamLoss,
    momentum_update,
    target_copy,
)
from vflflare.ssl.losses.byol import Predictor, normalized_mse
from vflflare.ssl.losses.hybrid import cross_party_loss, guided_local_loss, negative_cosine

torch.set_num_threads(1)


def _ntxent_reference(z1: np.ndarray, z2: np.ndarray, tau: float) -> float:
    """Eq. 2 of SS-VFL written out anchor by anchor."""
    z = np.concatenate([z1, z2])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    n = len(z1)
    total = 0.0
    for i in range(2 * n):
        pos = (i + n) % (2 * n)
        denominator = sum(math.exp(z[i] @ z[j] / tau) for j in range(2 * n) if j != i)
        total += -math.log(math.exp(z[i] @ z[pos] / tau) / denominator)
    return total / (2 * n)


def test_ntxent_hand_computed_two_by_two():
    # z1 = z2 = I, tau = 1: every anchor sees its positive at cos 1 and two other views at cos 0
    eye = torch.eye(2)
    assert NTXentLoss(temperature=1.0)(eye, eye).item() == pytest.approx(math.log(1 + 2 / math.e), rel=1e-6)
    z1 = np.array([[1.0, 0.0], [0.0, 2.0]])
    z2 = np.array([[0.6, 0.8], [0.8, -0.6]])
    got = NTXentLoss(temperature=0.5)(torch.tensor(z1, dtype=torch.float32), torch.tensor(z2, dtype=torch.float32))
    assert got.item() == pytest.approx(_ntxent_reference(z1, z2, 0.5), rel=1e-5)


def test_ntxent_matches_reference_on_random_batch_and_is_scale_invariant():
    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    t1, t2 = torch.tensor(z1, dtype=torch.float32), torch.tensor(z2, dtype=torch.float32)
    loss = NTXentLoss(0.2)
    assert loss(t1, t2).item() == pytest.approx(_ntxent_reference(z1, z2, 0.2), rel=1e-5)
    assert loss(3 * t1, t2).item() == pytest.approx(loss(t1, t2).item(), rel=1e-5)  # cosine similarity


def test_ntxent_gradient_reaches_both_views():
    z1, z2 = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    NTXentLoss()(z1, z2).backward()
    assert z1.grad.abs().sum() > 0 and z2.grad.abs().sum() > 0


def test_ntxent_rejects_mismatched_shapes_and_bad_temperature():
    with pytest.raises(ValueError):
        NTXentLoss()(torch.randn(4, 3), torch.randn(3, 3))
    with pytest.raises(ValueError):
        NTXentLoss(temperature=0.0)


def test_moco_hand_computed_with_a_set_queue():
    loss = MoCoLoss(temperature=0.5, queue_size=2, dim=2)
    loss.queue.copy_(torch.tensor([[0.0, 1.0], [-1.0, 0.0]]))
    # logits (cos / tau) = [1/0.5, 0/0.5, -1/0.5]; q is normalised first
    got = loss(torch.tensor([[2.0, 0.0]]), torch.tensor([[1.0, 0.0]]))
    expected = -math.log(math.exp(2) / (math.exp(2) + 1 + math.exp(-2)))
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_moco_defaults_follow_fedhssl():
    loss = MoCoLoss(dim=8)
    assert loss.temperature == 0.5 and loss.queue.shape == (4096, 8)
    torch.testing.assert_close(loss.queue.norm(dim=1), torch.ones(4096))


def test_moco_gradient_flows_into_query_not_key_or_queue():
    loss = MoCoLoss(queue_size=8, dim=3)
    q, k = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    before = loss.queue.clone()
    loss(q, k).backward()
    assert q.grad.abs().sum() > 0
    assert k.grad is None
    assert torch.equal(loss.queue, before)  # forward leaves the queue alone


def test_moco_enqueue_is_fifo_with_wraparound():
    loss = MoCoLoss(queue_size=3, dim=2)
    loss.enqueue(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    assert loss.pointer.item() == 2
    loss.enqueue(torch.tensor([[-3.0, 0.0], [0.0, -1.0]]))
    assert loss.pointer.item() == 1
    torch.testing.assert_close(loss.queue, torch.tensor([[0.0, -1.0], [0.0, 1.0], [-1.0, 0.0]]))
    loss.enqueue(torch.eye(2).repeat(3, 1))  # more keys than slots: the newest queue_size survive
    assert loss.pointer.item() == 1


def test_momentum_update_moves_target_towards_online_and_copies_buffers():
    online = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    target = target_copy(online)
    assert all(not p.requires_grad for p in target.parameters())
    with torch.no_grad():
        for p in target.parameters():
            p.zero_()
    online(torch.randn(8, 2))  # changes the online BatchNorm running stats
    momentum_update(online, target, momentum=0.9)
    for p_t, p_o in zip(target.parameters(), online.parameters()):
        torch.testing.assert_close(p_t, 0.1 * p_o.detach())
    torch.testing.assert_close(target[1].running_mean, online[1].running_mean)
    momentum_update(online, target, momentum=0.0)
    for p_t, p_o in zip(target.parameters(), online.parameters()):
        torch.testing.assert_close(p_t, p_o.detach())


def test_byol_hand_computed_and_stop_gradient():
    p1 = torch.tensor([[1.0, 0.0], [0.0, 3.0]], requires_grad=True)
    z2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]], requires_grad=True)
    p2 = torch.tensor([[1.0, 1.0], [2.0, 0.0]], requires_grad=True)
    z1 = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], requires_grad=True)
    # row 0: (2 - 2*0) + (2 - 2/sqrt2); row 1: (2 - 2*1) + (2 + 2)
    expected = ((2 + 2 - math.sqrt(2)) + (0 + 4)) / 2
    loss = BYOLLoss()(p1, z2, p2, z1)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert p1.grad.abs().sum() > 0 and p2.grad.abs().sum() > 0
    assert z1.grad is None and z2.grad is None
    assert BYOL_MOMENTUM == 0.995


def test_simsiam_hand_computed_and_stop_gradient():
    p1 = torch.tensor([[1.0, 0.0], [0.0, 3.0]], requires_grad=True)
    z2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]], requires_grad=True)
    p2 = torch.tensor([[1.0, 1.0], [2.0, 0.0]], requires_grad=True)
    z1 = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], requires_grad=True)
    expected = -0.5 * ((0 + 1 / math.sqrt(2)) + (1 - 1)) / 2
    loss = SimSiamLoss()(p1, z2, p2, z1)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert p1.grad.abs().sum() > 0 and p2.grad.abs().sum() > 0
    assert z1.grad is None and z2.grad is None
    assert SimSiamLoss()(z1, z1, z2, z2).item() == pytest.approx(-1.0)


def test_predictor_shape():
    assert Predictor(32, 16)(torch.randn(5, 32)).shape == (5, 32)
    assert Predictor(8, 4, batch_norm=False)(torch.randn(1, 8)).shape == (1, 8)


# --- "learns" on a real table ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def table() -> tuple[TabularBatch, TabularBatch]:
    x, _ = load_breast_cancer(return_X_y=True)
    x = x[:, :15]  # one party's half of the columns
    perm = np.random.default_rng(0).permutation(len(x))
    train, held = x[perm[:400]], x[perm[400:]]
    mean, std = train.mean(0), train.std(0)
    as_batch = lambda a: TabularBatch(  # noqa: E731
        torch.tensor((a - mean) / std, dtype=torch.float32), torch.zeros(len(a), 0, dtype=torch.int64)
    )
    return as_batch(train), as_batch(held)


def _train(table, method: str, steps: int = 300) -> tuple[list[float], float, float]:
    train, held = table
    torch.manual_seed(0)
    encoder = TabularEncoder(15, [], hidden=[64], rep_dim=32)
    predictor = Predictor(32, 64)
    target = target_copy(encoder)
    params = list(encoder.parameters()) + (list(predictor.parameters()) if method in ("byol", "simsiam") else [])
    optimizer = torch.optim.Adam(params, lr=1e-3)
    views = TwoViews(ScarfCorruption(train, rate=0.4, generator=torch.Generator().manual_seed(1)))
    moco = MoCoLoss(temperature=0.5, queue_size=256, dim=32)
    rows_gen = torch.Generator().manual_seed(2)
    losses = []
    for _ in range(steps):
        v1, v2 = views(train.take(torch.randint(len(train.numeric), (128,), generator=rows_gen)))
        z1, z2 = encoder(*v1), encoder(*v2)
        if method == "ntxent":
            loss = NTXentLoss(0.5)(z1, z2)
        elif method == "moco":
            with torch.no_grad():
                k1, k2 = target(*v1), target(*v2)
            loss = 0.5 * (moco(z1, k2) + moco(z2, k1))
        elif method == "byol":
            with torch.no_grad():
                t1, t2 = target(*v1), target(*v2)
            loss = BYOLLoss()(predictor(z1), t2, predictor(z2), t1)
        else:
            loss = SimSiamLoss()(predictor(z1), z2, predictor(z2), z1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if method == "moco":
            moco.enqueue(torch.cat([k1, k2]))
            momentum_update(encoder, target, 0.99)
        elif method == "byol":
            momentum_update(encoder, target, BYOL_MOMENTUM)
        losses.append(loss.item())
    encoder.eval()
    held_views = TwoViews(ScarfCorruption(train, rate=0.4, generator=torch.Generator().manual_seed(3)))
    with torch.no_grad():
        h1, h2 = held_views(held)
        sim = F.normalize(encoder(*h1), dim=1) @ F.normalize(encoder(*h2), dim=1).T
    n = len(sim)
    same = sim.diag().mean().item()
    different = (sim.sum() - sim.diag().sum()).item() / (n * n - n)
    return losses, same, different


@pytest.mark.parametrize("method", ["ntxent", "moco", "byol", "simsiam"])
def test_loss_learns_on_breast_cancer(table, method):
    _, same0, different0 = _train(table, method, steps=0)  # the untrained encoder already separates a little
    losses, same, different = _train(table, method)
    assert np.mean(losses[-30:]) < np.mean(losses[:10]) - 0.05
    # held-out rows: two views of one row are closer than views of different rows, by a wider margin
    # than before training (ntxent/moco reach ~0.55, byol/simsiam ~0.32; untrained ~0.13)
    assert same > different + 0.2
    assert same - different > (same0 - different0) + 0.1


# ---------------------------------------------------------------- FedHSSL Eq. 5 and Eq. 6 (ssl/losses/hybrid.py)


def _byol_pair(p, z):  # noqa: ANN001, ANN202
    return normalized_mse(p, z).mean()


def test_cross_party_loss_is_the_mean_over_the_received_representations_without_gradient_into_them():
    g = torch.Generator().manual_seed(0)
    p = torch.randn(6, 4, generator=g, requires_grad=True)
    z2, z3 = (torch.randn(6, 4, generator=g, requires_grad=True) for _ in range(2))
    active = cross_party_loss(negative_cosine, p, [z2, z3])  # party 1 hears K-1 = 2 passive parties
    expected = -0.5 * (F.cosine_similarity(p, z2, dim=1).mean() + F.cosine_similarity(p, z3, dim=1).mean())
    assert active.item() == pytest.approx(expected.item(), abs=1e-6)
    passive = cross_party_loss(negative_cosine, p, [z2])  # a passive party hears the active party only
    assert passive.item() == pytest.approx(-F.cosine_similarity(p, z2, dim=1).mean().item(), abs=1e-6)
    active.backward()
    assert p.grad is not None and z2.grad is None and z3.grad is None
    assert cross_party_loss(negative_cosine, p, [p.detach()]).item() == pytest.approx(-1.0)


def test_cross_party_loss_rejects_no_partner_and_mismatched_widths():
    p = torch.randn(3, 4)
    with pytest.raises(ValueError, match="at least one other party"):
        cross_party_loss(negative_cosine, p, [])
    with pytest.raises(ValueError, match=r"\(3, 8\) do not match the prediction \(3, 4\)"):
        cross_party_loss(negative_cosine, p, [torch.randn(3, 8)])


@pytest.mark.parametrize(
    "pair, symmetric, scale", [(negative_cosine, SimSiamLoss(), 1.0), (_byol_pair, BYOLLoss(), 0.5)]
)
def test_guided_local_loss_without_guidance_is_the_methods_symmetric_loss(pair, symmetric, scale):
    g = torch.Generator().manual_seed(1)
    p1, p2, t1, t2, c1, c2 = (torch.randn(5, 3, generator=g) for _ in range(6))
    plain = guided_local_loss(pair, (p1, p2), (t1, t2), (c1, c2), gamma=0.0)
    # Eq. 6 halves the symmetric sum; SimSiamLoss already does, BYOLLoss (as in BYOL) does not
    assert plain.item() == pytest.approx(scale * symmetric(p1, t2, p2, t1).item(), abs=1e-6)
    guided = guided_local_loss(pair, (p1, p2), (t1, t2), (c1, c2), gamma=0.5)
    assert guided.item() == pytest.approx(plain.item() + 0.5 * (pair(p1, c1) + pair(p2, c2)).item(), abs=1e-6)
    with pytest.raises(ValueError, match="gamma must be >= 0"):
        guided_local_loss(pair, (p1, p2), (t1, t2), (c1, c2), gamma=-0.1)


def test_guided_local_loss_trains_the_local_predictions_only():
    g = torch.Generator().manual_seed(2)
    p1, p2, t1, t2, c1, c2 = (torch.randn(4, 3, generator=g, requires_grad=True) for _ in range(6))
    guided_local_loss(negative_cosine, (p1, p2), (t1, t2), (c1, c2)).backward()
    assert p1.grad is not None and p2.grad is not None
    assert all(x.grad is None for x in (t1, t2, c1, c2))  # target and cross-party encoders only guide
