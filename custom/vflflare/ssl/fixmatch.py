"""FixMatch loss (Sohn et al., NeurIPS 2020) as used by one-shot VFL's local SSL, Eq. 4:

    l_ssl = l_s + lambda_u * l_u,
    l_s = CE(f(alpha(x_l)), y_l),
    l_u = mean_b 1[max q_b >= tau_(argmax q_b)] CE(f(A(u_b)), argmax q_b),   q_b = softmax(f(alpha(u_b)))

with optional class balancing of the pseudo-labels (`class_balance`):

- "none": q as is, one threshold tau.
- "distribution_alignment" (ReMixMatch, Berthelot et al. 2020): q <- normalise(q * pi / p~), pi = class
  proportions of the labeled set, p~ = mean prediction over the last `history` unlabeled batches.
- "balanced_threshold" (FlexMatch, Zhang et al. 2021, with its threshold warm-up): per-class thresholds
  tau_c = M(beta_c) tau, M(x) = x / (2 - x), beta_c = sigma_c / max(max_c sigma_c, unused), where sigma_c
  counts the unlabeled rows whose latest confident (q >= tau) prediction is c and `unused` the rows never
  predicted confidently. Classes the model has learned less get lower thresholds, so the pseudo-labels
  do not collapse onto the easy classes. Needs `num_unlabeled` and the batch's row positions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

CLASS_BALANCE = ("none", "distribution_alignment", "balanced_threshold")


class FixMatchLoss(nn.Module):
    def __init__(
        self,
        num_classes: int,
        threshold: float = 0.95,
        lambda_u: float = 1.0,
        class_balance: str = "none",
        labeled_marginal: Sequence[float] | None = None,
        num_unlabeled: int | None = None,
        history: int = 128,
    ) -> None:
        super().__init__()
        if class_balance not in CLASS_BALANCE:
            raise ValueError(f"class_balance must be one of {CLASS_BALANCE}, got {class_balance!r}")
        if class_balance == "distribution_alignment" and labeled_marginal is None:
            raise ValueError("distribution_alignment needs the labeled class proportions (labeled_marginal)")
        if class_balance == "balanced_threshold" and num_unlabeled is None:
            raise ValueError("balanced_threshold needs the number of unlabeled rows (num_unlabeled)")
        self.num_classes = num_classes
        self.threshold = threshold
        self.lambda_u = lambda_u
        self.class_balance = class_balance
        self.last_mask_rate = 0.0  # share of the last unlabeled batch that got a pseudo-label, for the log
        if labeled_marginal is not None:
            self.register_buffer("target_marginal", torch.as_tensor(labeled_marginal, dtype=torch.float32))
        self._predicted_marginals: deque[torch.Tensor] = deque(maxlen=history)
        if num_unlabeled is not None:
            self.register_buffer("confident_class", torch.full((num_unlabeled,), -1, dtype=torch.int64))

    def forward(
        self,
        logits_labeled: torch.Tensor,
        targets: torch.Tensor,
        logits_weak: torch.Tensor,
        logits_strong: torch.Tensor,
        unlabeled_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        pseudo, mask = self.pseudo_labels(logits_weak.detach(), unlabeled_index)
        unsup = (F.cross_entropy(logits_strong, pseudo, reduction="none") * mask).sum() / max(len(mask), 1)
        return F.cross_entropy(logits_labeled, targets) + self.lambda_u * unsup

    def pseudo_labels(
        self, logits_weak: torch.Tensor, unlabeled_index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """argmax of the (aligned) weak-view probabilities and the float mask of rows above their threshold."""
        probs = F.softmax(logits_weak, dim=1)
        if self.class_balance == "distribution_alignment" and len(probs):
            probs = self._align(probs)
        confidence, pseudo = probs.max(dim=1)
        if self.class_balance == "balanced_threshold":
            if unlabeled_index is None:
                raise ValueError("balanced_threshold needs the unlabeled rows' positions (unlabeled_index)")
            thresholds = self.class_thresholds()[pseudo]
            self._remember_confident(unlabeled_index, pseudo, confidence)
        else:
            thresholds = torch.full_like(confidence, self.threshold)
        mask = (confidence >= thresholds).float()
        self.last_mask_rate = float(mask.mean()) if len(mask) else 0.0
        return pseudo, mask

    def _align(self, probs: torch.Tensor) -> torch.Tensor:
        self._predicted_marginals.append(probs.mean(dim=0))
        running = torch.stack(tuple(self._predicted_marginals)).mean(dim=0)
        aligned = probs * self.target_marginal / running
        return aligned / aligned.sum(dim=1, keepdim=True).clamp_min(torch.finfo(aligned.dtype).tiny)

    def class_thresholds(self) -> torch.Tensor:
        """FlexMatch's tau_c from the current learning status (before this batch is counted)."""
        learned = self.confident_class[self.confident_class >= 0]
        sigma = torch.bincount(learned, minlength=self.num_classes).float()
        unused = float((self.confident_class < 0).sum())
        beta = sigma / max(float(sigma.max()), unused, 1.0)
        return self.threshold * beta / (2.0 - beta)

    def _remember_confident(self, index: torch.Tensor, pseudo: torch.Tensor, confidence: torch.Tensor) -> None:
        confident = confidence >= self.threshold
        self.confident_class[index[confident]] = pseudo[confident]
