"""A party's state between phases, by name: alignment ("rows", "labels"), models ("encoder",
"classifier", heads and their optimisers), pseudo-labels ("temporary_labels"), random generators.

Every phase reads and writes its state here and nowhere else, so `save` after a phase and `load`
into a fresh party resume from that point. What only lives inside one per-batch round trip (an
autograd graph waiting for its gradient) is not state and stays on the party.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch


class PartyState:
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._items: dict[str, Any] = {}

    def __setitem__(self, name: str, value: Any) -> None:
        self._items[name] = value

    def __getitem__(self, name: str) -> Any:
        if name not in self._items:
            raise RuntimeError(f"{self.owner}: no '{name}' yet; an earlier phase must produce it first")
        return self._items[name]

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def get(self, name: str, default: Any = None) -> Any:
        return self._items.get(name, default)

    def pop(self, name: str, default: Any = None) -> Any:
        return self._items.pop(name, default)

    def save(self, path: str | Path) -> Path:
        """Write every item (modules, optimisers and generators included) to `path`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        generators = {k for k, v in self._items.items() if isinstance(v, torch.Generator)}
        items = {k: (v.get_state() if k in generators else v) for k, v in self._items.items()}
        torch.save({"items": items, "generators": sorted(generators)}, path)
        return path

    def load(self, path: str | Path) -> None:
        """Replace the items with those saved at `path` (a file this party's own `save` wrote)."""
        saved = torch.load(Path(path), weights_only=False)
        items = saved["items"]
        for name in saved["generators"]:
            generator = torch.Generator()
            generator.set_state(items[name])
            items[name] = generator
        self._items = items
