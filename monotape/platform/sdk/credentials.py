"""Where a terminal's token rides on the upgrade, and how a newer one replaces it. Pure.

A token comes in the ``Authorization: Bearer`` header (what ``monotape tape`` does: URLs get
logged) or the URL's ``token`` query parameter; the node reads the header first. A reconnect
presents the latest token the terminal holds: one from its ``token_provider`` (set as the
query parameter, as ever), else the latest one the node took in-band (``refresh``) in the place
the first one was, else the first one unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["presented_token", "with_bearer", "with_token"]

_BEARER = "bearer "


def with_token(url: str, token: str) -> str:
    """``url`` with its ``token`` query parameter set to ``token`` (appended if absent)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "token"]
    query.append(("token", token))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _pairs(headers: Any) -> list[tuple[str, str]]:
    """``additional_headers`` (a mapping, websockets' ``Headers`` or (name, value) pairs) as
    pairs; anything else as none."""
    if isinstance(headers, Mapping):
        return [(str(k), str(v)) for k, v in headers.items()]
    if isinstance(headers, Iterable) and not isinstance(headers, str | bytes):
        return [(str(k), str(v)) for k, v in headers]
    return []


def _bearer_of(value: str) -> str | None:
    return value[len(_BEARER) :].strip() if value.lower().startswith(_BEARER) else None


def presented_token(url: str, connect_kwargs: Mapping[str, Any]) -> str | None:
    """The token an attempt presents: its ``Authorization: Bearer`` header, else the URL's
    ``token`` parameter; None when it presents none."""
    for name, value in _pairs(connect_kwargs.get("additional_headers")):
        if name.lower() == "authorization" and (token := _bearer_of(value)) is not None:
            return token
    for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if k == "token":
            return v
    return None


def with_bearer(url: str, connect_kwargs: dict[str, Any], token: str) -> tuple[str, dict[str, Any]]:
    """``token`` in place of the one the attempt presents, where it presents it (the header,
    else the query parameter); unchanged when it presents none (the node has auth off)."""
    pairs = _pairs(connect_kwargs.get("additional_headers"))
    if any(n.lower() == "authorization" and _bearer_of(v) is not None for n, v in pairs):
        swapped = [
            (n, f"Bearer {token}") if n.lower() == "authorization" else (n, v) for n, v in pairs
        ]
        return url, {**connect_kwargs, "additional_headers": swapped}
    if any(k == "token" for k, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)):
        return with_token(url, token), connect_kwargs
    return url, connect_kwargs
