"""The composition root: pipeline, admin API, collectors, endpoints."""
