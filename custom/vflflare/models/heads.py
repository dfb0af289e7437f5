"""Networks on representations, whatever the modality: the label party's classifier f_c and the
sites' local heads (FixMatch classifier, contrastive projection g)."""

from __future__ import annotations

import torch
from torch import nn


class MLPHead(nn.Module):
    """Classifier on representations: f_c, the auxiliary f_c^k and a site's local SSL head.
    Linear when hidden == 0, else one ReLU hidden layer."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 0) -> None:
        super().__init__()
        if hidden < 0:
            raise ValueError(f"hidden must be >= 0, got {hidden}")
        self.in_dim = in_dim
        if hidden == 0:
            self.net: nn.Module = nn.Linear(in_dim, num_classes)
        else:
            self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, reps: torch.Tensor) -> torch.Tensor:
        return self.net(reps)


class ProjectionHead(nn.Module):
    """g(.) of contrastive pretraining (SimCLR/SCARF): a one-hidden-layer MLP from the representation
    to the space where the NT-Xent loss is taken. Used only during a site's local pretraining and then
    discarded; what leaves the site is f_k's output, never g's."""

    def __init__(self, in_dim: int, out_dim: int, hidden: int | None = None) -> None:
        super().__init__()
        if out_dim < 1:
            raise ValueError(f"projection out_dim must be >= 1, got {out_dim}")
        hidden = hidden or in_dim
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, reps: torch.Tensor) -> torch.Tensor:
        return self.net(reps)


class Projector(nn.Module):
    """The 3-FC projector FedHSSL puts on top of every encoder during pretraining (Appendix B: [512, 512,
    512] for SimSiam and BYOL, [512, 512, 128] for MoCo), with BatchNorm after each layer as in SimSiam.
    The finetuned model does not keep it."""

    def __init__(self, in_dim: int, widths: list[int] | tuple[int, ...]) -> None:
        super().__init__()
        if not widths or min(widths) < 1:
            raise ValueError(f"projector widths must be a non-empty list of positive sizes, got {list(widths)}")
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip([in_dim, *widths], widths)):
            layers += [nn.Linear(a, b), nn.BatchNorm1d(b)]
            if i < len(widths) - 1:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        self.out_dim = widths[-1]

    def forward(self, reps: torch.Tensor) -> torch.Tensor:
        return self.net(reps)
