"""A probe run as a script in a child process whose PYTHONPATH picks the code tree measured (the
performance suite's image_views part runs it per tree): cost of the image views (vflflare.ssl.image_augment)
per image and view, one torch thread: FixMatch's weak and strong views and one SimSiam-style view, on a batch
of 224 CIFAR strips [224, 3, 32, 16] and 256 MNIST strips [256, 1, 28, 14] (standard normal pixels), median
of 15 calls after 2 warm-up calls.

The package comes from PYTHONPATH, so two code trees compare in one run, e.g. (issue 29 item 5):

    git worktree add /tmp/views_before <commit>
    vflflare bench run performance --methods image_views --set trees='["/tmp/views_before", "."]'
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

import vflflare
from vflflare.data.image_batch import ImageBatch
from vflflare.ssl.image_augment import contrastive_image_views, fixmatch_image_views

REPS, WARM_UP = 15, 2
CASES = [("CIFAR strips", 3, (32, 16), 224), ("MNIST strips", 1, (28, 14), 256)]


def main() -> None:
    """With --json, one JSON object per batch instead of the text lines (the performance suite records them)."""
    as_json = "--json" in sys.argv
    torch.set_num_threads(1)
    if not as_json:
        print(f"package: {vflflare.__file__}")
    for name, channels, size, n in CASES:
        batch = ImageBatch(torch.randn(n, channels, *size, generator=torch.Generator().manual_seed(0)))
        fixmatch = fixmatch_image_views(channels, size, torch.Generator().manual_seed(0))
        simsiam = contrastive_image_views(channels, size, torch.Generator().manual_seed(0))
        seconds: dict[str, list[float]] = {"weak": [], "strong": [], "contrastive": []}
        for rep in range(WARM_UP + REPS):
            t0 = time.perf_counter()
            weak = fixmatch.weak(batch)
            t1 = time.perf_counter()
            fixmatch.strong_on_weak(weak)
            t2 = time.perf_counter()
            simsiam.transform_a(batch)
            t3 = time.perf_counter()
            if rep >= WARM_UP:
                for key, dt in (("weak", t1 - t0), ("strong", t2 - t1), ("contrastive", t3 - t2)):
                    seconds[key].append(dt)
        ms = {key: 1000 * statistics.median(values) / n for key, values in seconds.items()}
        if as_json:
            print(json.dumps({"batch": name, "ms_per_view": {k: round(v, 5) for k, v in ms.items()}}))
            continue
        print(
            f"{name} [{n}, {channels}, {size[0]}, {size[1]}], ms per image and view: weak {ms['weak']:.4f}, "
            f"strong {ms['strong']:.4f}, FixMatch mean {(ms['weak'] + ms['strong']) / 2:.4f}, "
            f"SimSiam {ms['contrastive']:.4f}"
        )


if __name__ == "__main__":
    main()
