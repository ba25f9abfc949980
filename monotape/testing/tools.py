"""A system tool a test needs: on a laptop its absence skips the test with the package to
install; under ``CI=true`` (where ``.ci/run`` installs it) its absence fails the test."""

from __future__ import annotations

import os
import shutil

import pytest

__all__ = ["missing_tool", "require_tool"]


def missing_tool(reason: str) -> None:
    """Skip with ``reason`` (which names the package), or fail under CI=true. Never returns."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: required)")
    pytest.skip(reason)


def require_tool(binary: str, package: str) -> str:
    """The tool's path on PATH; else skip naming the Debian package, or fail under CI=true."""
    path = shutil.which(binary)
    if path is None:
        missing_tool(f"{binary} not found: apt-get install --no-install-recommends {package}")
        raise AssertionError("unreachable")  # pytest.skip/fail raise
    return path
