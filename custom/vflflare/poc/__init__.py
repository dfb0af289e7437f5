"""A local NVFlare POC run from Python: its processes, a private workspace, and an emulated WAN link per site
(poc/run.sh, the tests and the benchmarks that need real NVFlare processes)."""
