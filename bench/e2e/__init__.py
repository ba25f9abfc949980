"""Benchmarks against a real `monotape run` (the launcher's node): storm and latency record."""
