"""``monotape tape KEY...``: a live tape of a few symbols, and why it stopped when it stops.

One terminal (the SDK, ``sdk/client.py``) that prints every quote it renders. The token goes
in an ``Authorization`` header, never in the URL. Exit codes: 0 after ``--count`` quotes or
Ctrl-C; 1 when the node ended the session (drained, token expired, shut down, connection lost)
or a regression was seen; 2 when it could not start (``ClientError``: refused upgrade, nothing
listening, none of the keys can be subscribed). A key the node refuses (malformed, unknown,
over the limit) is named on stderr with the node's reason while the others keep streaming.

``--max-hz`` caps the tape's frame rate (the node sends every k-th frame, full records);
``--refresh`` keeps the session past its token's lifetime by sending a fresh token, minted from
the same data dir's dev key, on the open connection (docs/sdk.md).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Final

from websockets.exceptions import InvalidHandshake, InvalidURI

from monotape.commands.clientside import ClientError, client_token, connect_failure
from monotape.config import Config
from monotape.platform.wire.codec import ErrorCode, Refusal

__all__ = ["describe_close", "dev_key_refresh", "run_tape"]

SUB: Final = "monotape-tape"  # the tape's tokens' subject: a refresh must name the same one

_WHY: Final = {
    "drain": "the node drained its terminals (it is leaving the rotation)",
    "token expired": "the token expired: run tape again (it mints a fresh one; --refresh keeps "
    "it fresh) or pass a new --token",
    "server_shutdown": "the node shut down",
}


def describe_close(reason: str, code: int, reconnect_after_ms: int) -> str:
    why = _WHY.get(reason, f"the node closed the session: {reason or 'no reason given'}")
    return (
        f"{why} (close {code}; the node asks terminals to come back after {reconnect_after_ms} ms)"
    )


def dev_key_refresh(cfg: Config, minted: bool) -> Callable[[], Awaitable[str]]:
    """The refresh callback of a tape whose token was minted from the data dir's dev key: a
    fresh one from the same key, same subject. ClientError for a token given (``--token``,
    ``MONOTAPE_TOKEN``): nothing here can mint its successor."""
    if not minted:
        raise ClientError(
            "--refresh mints fresh tokens from the data dir's dev key, so it cannot refresh a "
            "token given with --token or MONOTAPE_TOKEN: drop --refresh, or the token"
        )

    async def refresh() -> str:
        # the key file is read and the token signed off the event loop
        credential = await asyncio.to_thread(client_token, None, cfg, {}, sub=SUB)
        if credential.token is None:
            raise ClientError("no token could be minted from the data dir's dev key")
        return credential.token

    return refresh


def _print_refused(refused: Sequence[Refusal], what: str) -> None:
    """One stderr line per refused key, with the node's reason; the tape goes on without it."""
    for r in refused:
        name = ErrorCode(r.code).name if r.code in ErrorCode._value2member_map_ else r.code
        print(f"monotape tape: {what}refused {r.key!r}: {r.reason} ({name})", file=sys.stderr)


async def run_tape(
    url: str,
    token: str | None,
    keys: Sequence[str],
    priority: Sequence[str],
    count: int | None,
    cfg: Config,
    *,
    minted: bool,
    max_hz: float = 25.0,
    refresh: bool = False,
) -> int:
    from monotape.platform.sdk.client import KeysRefused, ServerError, TerminalClient

    refresh_token = dev_key_refresh(cfg, minted) if refresh and token else None
    client = TerminalClient(url, max_hz=max_hz, refresh_token=refresh_token)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        await client.connect(additional_headers=headers)
    except (InvalidHandshake, InvalidURI, OSError, TimeoutError) as exc:
        raise connect_failure(url, exc, cfg, minted) from None
    try:
        # The node answers key by key: refused keys are named with why, the others stream.
        try:
            answer = await client.subscribe(keys)
            _print_refused(answer.refused, "")
            if priority:
                try:
                    marked = await client.set_priority(priority)
                except KeysRefused as exc:  # the subscriptions stand; only the marks failed
                    _print_refused(exc.answer.refused, "priority ")
                else:
                    _print_refused(marked.refused, "priority ")
        except KeysRefused as exc:
            _print_refused(exc.answer.refused, "")
            raise ClientError(
                "none of the keys can be subscribed (monotape symbols lists the keys)"
            ) from None
        except ServerError as exc:
            raise ClientError(
                f"the node refused the subscription: {exc} (monotape symbols lists the keys)"
            ) from None
        print(
            f"{'time':<12} {'symbol':<16} {'bid':>12} {'ask':>12} {'last':>12} {'size':>7}  "
            f"{'version':<26} path",
            flush=True,
        )
        n = 0
        async for q in client.updates():
            stamp = datetime.now().strftime("%H:%M:%S.%f")[:-3]
            print(
                f"{stamp:<12} {q.key:<16} {q.price(q.bid):>12.{q.decimals}f} "
                f"{q.price(q.ask):>12.{q.decimals}f} {q.price(q.last):>12.{q.decimals}f} "
                f"{q.size:>7}  {q.epoch}:{q.seq:<24} {q.source}",
                flush=True,
            )
            n += 1
            if count is not None and n >= count:
                break
        if client.stats.regressions:
            print(f"monotape tape: REGRESSIONS SEEN: {client.stats.regressions}", file=sys.stderr)
            return 1
        if count is not None and n >= count:
            return 0
        closed = client.close_message
        if closed is not None:
            why = describe_close(closed.reason, closed.code, closed.reconnect_after_ms)
        else:
            why = "the connection was lost without a close from the node"
        print(f"monotape tape: stopped: {why}", file=sys.stderr)
        return 1
    finally:
        await client.close()
