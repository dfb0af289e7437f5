"""Vertical federated learning with few overlapping samples, as NVIDIA FLARE jobs."""

__version__ = "0.1.0"  # the release; pyproject.toml's version (tests/test_code_identity.py checks they agree)
