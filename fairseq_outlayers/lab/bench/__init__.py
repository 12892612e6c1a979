"""The helpers of the benchmark scripts (``scripts/bench_*.py``): timing, memory probes, result tables."""
