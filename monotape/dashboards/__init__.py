"""Filled by its own issue."""
