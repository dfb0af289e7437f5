"""Partial model aggregation (FedHSSL's PMA, He et al., Alg. 1 step 3): each party sends the shareable
part of its model (f_lt o h_l), the coordinator averages them, each party loads the average.

Plain: NVFlare's WeightedAggregationHelper averages the parties' tensors (equal weights: the paper's
1/K sum). With `he: true`: the secure aggregation block, so the coordinator adds CKKS ciphertexts and
never sees a party's weights or the average; each party divides the decrypted sum by K.
"""

from __future__ import annotations

import numpy as np
import torch
from nvflare.app_common.aggregators.weighted_aggregation_helper import WeightedAggregationHelper

from vflflare.algorithms.blocks.secure_aggregation import secure_sum
from vflflare.privacy.he_keys import SHARED_KEY_TASKS
from vflflare.protocol.payload import Payload
from vflflare.protocol.run_context import RunContext

CONTRIBUTE, UPDATE = "pma_contribute", "pma_update"
SHARED_KEY_TASKS.add(CONTRIBUTE)  # with he: summed under the kit's shared key, every site decrypts the sum


def average(contributions: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The plain mean of the parties' tensors, which must have the same names and shapes."""
    sites = sorted(contributions)
    first = contributions[sites[0]]
    for site in sites[1:]:
        theirs = contributions[site]
        if set(theirs) != set(first):
            raise ValueError(f"PMA: {site} shares {sorted(theirs)}, {sites[0]} shares {sorted(first)}")
        for name, value in theirs.items():
            if np.shape(value) != np.shape(first[name]):
                raise ValueError(
                    f"PMA: {name} is {np.shape(value)} at {site} but {np.shape(first[name])} at "
                    f"{sites[0]}; the parties' local top encoders must have the same shape"
                )
    helper = WeightedAggregationHelper(weigh_by_local_iter=False)
    for site in sites:
        helper.add({k: np.asarray(v, dtype=np.float64) for k, v in contributions[site].items()}, 1.0, site, 0)
    return {k: np.asarray(v, dtype=np.float32) for k, v in helper.get_result().items()}


def partial_model_aggregation(ctx: RunContext, *, phase: str = "pma", iso: dict[str, float] | None = None) -> None:
    """One PMA round: one upload (the shared weights) and one download (their average, or with ctx.he_context its
    encrypted sum) per site. iso: {site: lambda} for the sites that add ISO noise to their contribution."""
    net = ctx.net
    requests = {s: {"iso": iso[s]} if iso and iso.get(s) else {} for s in net.sites}
    if ctx.he_context is not None:
        secure_sum(
            ctx,
            CONTRIBUTE,
            requests,
            UPDATE,
            result_requests={s: {"parties": len(net.sites)} for s in net.sites},
            phase=phase,
        )
        return
    with net.ledger.phase(phase):
        replies = net.exchange(CONTRIBUTE, requests)
        mean = average({s: reply["weights"] for s, reply in replies.items()})
        net.exchange(UPDATE, {s: {"average": {"weights": mean}} for s in net.sites})


class PartialAggregationSite:
    """Site half: `shared_module()` names the module whose float tensors PMA averages."""

    steps = (CONTRIBUTE, UPDATE)

    def shared_module(self) -> torch.nn.Module:
        raise NotImplementedError

    def shared_weights(self) -> dict[str, np.ndarray]:
        return {
            name: t.detach().cpu().numpy().astype(np.float32)
            for name, t in self.shared_module().state_dict().items()
            if t.is_floating_point()
        }

    def pma_contribute(self, payload: Payload) -> Payload:
        weights = self.shared_weights()
        strength = float(payload.get("iso", 0.0))
        if strength > 0:
            weights = {k: self.with_iso(torch.as_tensor(v), strength).numpy() for k, v in weights.items()}
        return {"weights": weights}

    def pma_update(self, payload: Payload) -> Payload:
        if "sum" in payload:
            weights = {
                k: np.asarray(v, dtype=np.float32) / int(payload["parties"])
                for k, v in payload["sum"]["weights"].items()
            }
        else:
            weights = payload["average"]["weights"]
        module = self.shared_module()
        own = module.state_dict()
        missing = sorted({k for k, t in own.items() if t.is_floating_point()} - set(weights))
        if missing:
            raise ValueError(f"site '{self.site}': the PMA average lacks {missing}")
        module.load_state_dict(
            {**own, **{k: torch.as_tensor(np.asarray(v)).reshape(own[k].shape) for k, v in weights.items()}}
        )
        return {}
