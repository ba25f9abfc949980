"""``monotape symbols [PATTERN]``: the keys a terminal can subscribe to, with prices.

From the running node's admin API (``GET /admin/symbols``: its real dictionary, a replay's
included, with current prices and their scale) when a node runs on the data directory or
``--admin-url`` names one; otherwise from the simulator's built-in universe, which is what a
plain ``monotape run`` with this configuration will list. PATTERN is a glob (``XNAS:*``) or a
substring (``AAPL``), any case.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from monotape.commands.clientside import (
    ClientError,
    admin_url,
    client_token,
    explain_refusal,
    redact,
    running_node,
)
from monotape.config import Config

__all__ = ["run_symbols"]


def _from_node(base: str, token: str | None, pattern: str, cfg: Config, minted: bool) -> Any:
    request = urllib.request.Request(f"{base}/admin/symbols?{urlencode({'pattern': pattern})}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        with_reason = body
        with contextlib.suppress(ValueError, AttributeError):
            with_reason = str(json.loads(body).get("error", body))
        raise ClientError(
            explain_refusal(exc.code, with_reason, exc.headers.get("Retry-After"), cfg, minted)
        ) from None


def _built_in(pattern: str, cfg: Config) -> dict[str, Any]:
    from monotape.platform.admin.desk import match_keys, symbol_row
    from monotape.platform.feeds.simulator import build_universe

    sim = cfg.simulator
    universe = build_universe(sim.venues, sim.instruments, sim.seed)
    by_key = {i.key: i for i in universe}
    keys = match_keys([i.key for i in universe], pattern)
    rows = [symbol_row(by_key[k]) for k in keys]
    return {"pattern": pattern, "count": len(keys), "symbols": rows}


def _price(current: Any, field: str, decimals: int) -> str:
    if not current:
        return "-"
    return f"{current['price'][field]:.{decimals}f}"


def run_symbols(
    pattern: str, cfg: Config, *, url: str | None, token: str | None, as_json: bool
) -> int:
    node = running_node(cfg)
    if url or node is not None:
        base = admin_url(url, cfg)
        cred = client_token(token, cfg, sub="monotape-symbols", admin=True, ttl_s=300)
        try:
            body = _from_node(base, cred.token, pattern, cfg, cred.minted)
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", exc)
            raise ClientError(f"cannot reach the admin API at {redact(base)}: {why}") from None
        source = f"the node at {redact(base)}"
    else:
        body = _built_in(pattern, cfg)
        source = (
            "the simulator's built-in universe (no node runs on the data dir "
            f"{Path(cfg.data_dir).resolve()}; a replay lists its own keys)"
        )
    rows = body["symbols"]
    if as_json:
        print(json.dumps(body))
    else:
        print(f"{'key':<18} {'decimals':>8} {'bid':>14} {'ask':>14} {'last':>14}")
        for row in rows:
            d = row["price_decimals"]
            cur = row.get("current")
            print(
                f"{row['key']:<18} {d:>8} {_price(cur, 'bid', d):>14} "
                f"{_price(cur, 'ask', d):>14} {_price(cur, 'last', d):>14}"
            )
    print(f"{len(rows)} of {body['count']} matching symbols, from {source}", file=sys.stderr)
    if not rows:
        print("no symbol matches; try a shorter pattern, or none", file=sys.stderr)
        return 1
    return 0
