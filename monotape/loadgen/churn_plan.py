"""The churn's plan: its knobs (``ChurnConfig``, docs/churn.md) and the loopback-only rule
(``check_loopback``: an RST storm aimed at a production endpoint is what it must never be)."""

from __future__ import annotations

import ipaddress
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

__all__ = ["ChurnConfig", "ChurnFailed", "ChurnRefused", "Positive", "Share", "check_loopback"]

Positive = Annotated[float, Meta(gt=0)]
Share = Annotated[float, Meta(ge=0, le=1)]


class ChurnConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The knobs (docs/churn.md). Defaults run on a laptop against ``monotape run``."""

    arrival_rate_per_s: Positive = 100.0  # base trace: session arrivals per second
    mean_session_s: Positive = 5.0  # base trace: mean session length (exponential)
    rate_multiple: Positive = 1.3  # replay the base trace at this multiple
    rst_share: Share = 0.06  # share of sessions that leave with an RST (seed: ~6%)
    mean_change_interval_s: Positive = 2.0  # mean time between subscription changes
    duration_s: Positive = 30.0  # no arrivals after this; live sessions are ended at it
    drain_s: Positive = 5.0  # then at most this long for sessions to finish, then cancel
    max_connections: Annotated[int, Meta(ge=1)] = 1_000  # concurrently open (or opening)
    max_total: Annotated[int, Meta(ge=1)] = 100_000  # sessions started, over the whole run
    open_timeout_s: Positive = 5.0
    close_timeout_s: Positive = 2.0
    progress_interval_s: Positive = 1.0
    retry_cap_s: Positive = 10.0  # a 503's Retry-After is honoured up to this long
    seed: int = 1


class ChurnRefused(ValueError):
    """The URL is not one the driver will aim at (not ws://, or not loopback)."""


class ChurnFailed(RuntimeError):
    """The probe session could not read the dictionary; ``str()`` is one line saying why.

    ``failure`` is what the upgrade raised (``InvalidStatus`` for a refusal, ``OSError`` when
    nothing listens), so a command line can say what to do about it with what it knows about
    the token (``clientside.connect_failure``)."""

    def __init__(self, message: str, failure: BaseException) -> None:
        super().__init__(message)
        self.failure = failure


def check_loopback(url: str) -> tuple[str, int]:
    """(host, port) of a ws:// URL on 127.0.0.0/8, ::1 or localhost; ChurnRefused otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        raise ChurnRefused(f"churn needs a ws:// or wss:// URL, got {url!r}")
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "wss" else 80)
    except ValueError as exc:
        raise ChurnRefused(f"bad port in {url!r}") from exc
    if host == "localhost":
        return host, port
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ChurnRefused(
            f"churn refuses {host!r}: it opens and resets connections at a high rate, so it only"
            " targets loopback (127.0.0.0/8, ::1 or localhost)"
        )
    return host, port
