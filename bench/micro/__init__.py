"""Benchmarks of one stage or library call, in-process: codec, wire, ingest, auth, GC, HDR."""
