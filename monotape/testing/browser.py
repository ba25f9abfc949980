"""Headless Chromium for the browser tests and the page bench: one set of flags, one way to
collect what a page complains about."""

from __future__ import annotations

from typing import Any

__all__ = ["CHROMIUM_ARGS", "collect_problems"]

# Debian's chromium, headless, as root in CI; without the background-networking flags it keeps
# trying hosts this machine cannot reach.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def collect_problems(page: Any, problems: list[str]) -> None:
    """Append every console error or warning and every uncaught page error to ``problems``."""
    page.on(
        "console",
        lambda msg: (
            problems.append(f"console {msg.type}: {msg.text}")
            if msg.type in ("error", "warning")
            else None
        ),
    )
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
