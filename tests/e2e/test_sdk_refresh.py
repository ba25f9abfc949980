"""The SDK's token refresh against the real node: a terminal whose tokens live ~3 s refreshes
three times on the one connection while quotes keep flowing; one without ``refresh_token`` is
closed at expiry with a jittered hint; one whose fresh tokens are refused lets the token expire
and comes back through its token provider. Nothing here asserts how fast (the machine may be
busy): the schedule leaves a token's last 15-40% as margin."""

from __future__ import annotations

import asyncio
import time

import pytest

from monotape.platform.sdk.client import Quote, TerminalClient
from monotape.platform.sdk.refresh import token_expiry
from monotape.platform.wire.codes import CloseCode
from tests.conftest import RunningServer, ServerFactory, until

pytestmark = [pytest.mark.e2e]

# Each token's lifetime, shorter than the session the test watches. Minted tokens carry whole
# seconds (exp = int(now) + ttl), so these live 3-4 s; the node refuses an upgrade or a refresh
# past exp (no leeway there), and a busy machine needs the margin.
TTL_S = 4.0


async def keys_of(server: RunningServer, n: int) -> list[str]:
    probe = TerminalClient(server.url)
    hello = await asyncio.wait_for(probe.connect(), 20)
    await probe.close()
    return [i.key for i in hello.instruments[:n]]


async def test_three_refreshes_on_one_connection_while_quotes_flow(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    keys = await keys_of(server, 20)
    minted: list[str] = []

    async def refresh() -> str:
        minted.append(await asyncio.to_thread(server.mint, ttl_s=TTL_S))
        return minted[-1]

    rendered: list[tuple[float, Quote]] = []
    states: list[str] = []
    first = server.mint(ttl_s=TTL_S)
    first_exp = token_expiry(first)
    assert first_exp is not None
    c = TerminalClient(
        server.bare_url,
        reconnect=True,  # a close would be survived silently: the counters must show none
        refresh_token=refresh,
        on_render=lambda q: rendered.append((time.time(), q)),
        on_state=states.append,
    )
    await asyncio.wait_for(c.connect(additional_headers={"Authorization": f"Bearer {first}"}), 20)
    await c.subscribe(keys)
    await until(lambda: c.stats.refreshes >= 3, "three refreshes", timeout_s=60)
    # the session has outlived its first token (and the second's), on the same connection
    assert time.time() > first_exp
    at_third = len(rendered)
    await until(lambda: len(rendered) > at_third + 20, "quotes after the third refresh")
    assert c.stats.connects == 1 and c.stats.reconnects == 0 and c.stats.closes == 0
    assert states == ["connecting", "connected"]
    assert c.stats.refresh_failures == 0 and c.stats.regressions == 0
    assert c.upkeep.token in minted
    # quotes flowed past the first token's expiry, not only before it
    assert any(at > first_exp for at, _ in rendered)
    await c.close()


async def test_without_refresh_the_session_closes_at_expiry_with_a_jittered_hint(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    keys = await keys_of(server, 2)
    c = TerminalClient(server.bare_url)
    token = server.mint(ttl_s=TTL_S)
    await asyncio.wait_for(c.connect(additional_headers={"Authorization": f"Bearer {token}"}), 20)
    await c.subscribe(keys)
    await until(lambda: not c.connected, "the expiry close", timeout_s=30)
    close = c.close_message
    assert close is not None and close.reason == "token expired"
    assert close.code == CloseCode.POLICY_VIOLATION
    assert 500 <= close.reconnect_after_ms <= 5000  # jittered 0.5-5 s, never a fixed value
    await c.close()


async def test_a_refused_refresh_lets_the_token_expire_and_the_provider_brings_one(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start()
    keys = await keys_of(server, 2)

    async def another_subject() -> str:  # refused: TOKEN_REJECTED (another subject)
        return await asyncio.to_thread(server.mint, ttl_s=TTL_S, sub="intruder")

    first = iter([server.mint(ttl_s=TTL_S)])  # the first connection's: it will expire
    provided: list[str] = []

    def provider() -> str:
        token = next(first, None)
        if token is None:
            provided.append(server.mint(ttl_s=60))
            token = provided[-1]
        return token

    c = TerminalClient(
        server.bare_url, reconnect=True, refresh_token=another_subject, token_provider=provider
    )
    await asyncio.wait_for(c.connect(), 20)
    await c.subscribe(keys)
    await until(lambda: c.stats.refresh_failures >= 1, "the refused refresh", timeout_s=30)
    assert any("TOKEN_REJECTED" in line for line in c.stats.error_log)
    await until(lambda: c.stats.reconnects == 1 and c.connected, "the reconnect", timeout_s=60)
    assert c.stats.last_close_code == CloseCode.POLICY_VIOLATION
    assert c.stats.last_close_hint_ms is not None and 500 <= c.stats.last_close_hint_ms <= 5000
    assert provided, "the reconnect did not ask the token provider"
    await until(lambda: set(keys) <= set(c.view), "restored after the reconnect")
    await c.close()
