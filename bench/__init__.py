"""Benchmarks: `make bench` runs `python -m bench [--quick]` (see docs/benchmarks.md)."""
