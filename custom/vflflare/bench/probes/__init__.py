"""Probes the suites run as scripts in child processes, one per code tree measured (PYTHONPATH)."""
