"""Tabular networks: the bottom model f_k of a feature party holding a table.

Models only; the training loops live in ssl/ and algorithms/.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def embedding_dim(cardinality: int) -> int:
    """Width of a categorical embedding: one slot per index, capped so wide columns stay cheap."""
    return min(16, cardinality)


class TabularEncoder(nn.Module):
    """f_k(x; theta_k) of Eq. 3: embeddings of the categorical indices concatenated with the numeric
    columns, then an MLP with the given hidden widths (default one hidden layer of 64: the paper's
    "two-layer MLP" for the credit table).

    The output layer is linear: the representations feed linear heads and the SDPA estimate (Eq. 10),
    and a final ReLU would zero whole dimensions for some rows.
    """

    def __init__(
        self, numeric_dim: int, cardinalities: Sequence[int], hidden: Sequence[int] = (64,), rep_dim: int = 32
    ) -> None:
        super().__init__()
        if numeric_dim < 0:
            raise ValueError(f"numeric_dim must be >= 0, got {numeric_dim}")
        if numeric_dim == 0 and len(cardinalities) == 0:
            raise ValueError("TabularEncoder needs at least one numeric or categorical column")
        if any(c < 1 for c in cardinalities):
            raise ValueError(f"every categorical cardinality must be >= 1, got {list(cardinalities)}")
        self.numeric_dim = numeric_dim
        self.rep_dim = rep_dim
        self.embeddings = nn.ModuleList(nn.Embedding(c, embedding_dim(c)) for c in cardinalities)
        in_dim = numeric_dim + sum(e.embedding_dim for e in self.embeddings)
        widths = [in_dim, *hidden]
        layers: list[nn.Module] = []
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(widths[-1], rep_dim))

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        embedded = [emb(categorical[:, j]) for j, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat([numeric, *embedded], dim=1) if embedded else numeric)  # no copy of wide rows
