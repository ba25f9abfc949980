"""Per-key answers end to end: the real `monotape run` on loopback, a raw WebSocket terminal
(to see the wire), the SDK and `monotape tape` (docs/wire.md, Requests)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import msgspec
import pytest
import websockets

from monotape.platform.sdk.client import KeysRefused, TerminalClient
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.requests import MAX_REQUEST_BYTES, Subscribe, encode_request
from tests.conftest import RunningServer, ServerFactory

pytestmark = [pytest.mark.e2e]

MALFORMED = "xnas:aapl"  # lower case: a replay used to accept it, subscribe never could
UNKNOWN = "XNAS:NOPE"  # well formed, not in the dictionary


async def raw(server: RunningServer) -> tuple[websockets.ClientConnection, codec.Hello]:
    ws = await websockets.connect(server.url, compression=None, max_size=2**23)
    hello = codec.decode_message(await ws.recv(decode=False))
    assert isinstance(hello, codec.Hello)
    return ws, hello


async def until_ack(ws: websockets.ClientConnection, req: int) -> list[codec.ServerMessage]:
    """Every message up to and including the ACK of ``req`` (frames and heartbeats skipped)."""
    seen: list[codec.ServerMessage] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        msg = codec.decode_message(await asyncio.wait_for(ws.recv(decode=False), 15))
        if isinstance(msg, codec.Frame | codec.Heartbeat):
            continue
        seen.append(msg)
        if isinstance(msg, codec.Ack | codec.Error) and msg.req == req:
            return seen
    raise AssertionError(f"no answer to req {req}: {seen}")


async def published_key(server: RunningServer) -> str:
    """A key the node has already published a tick for, so its snapshot has a record."""
    probe = TerminalClient(server.url)
    hello = await probe.connect()
    await probe.subscribe([i.key for i in hello.instruments[:100]])
    deadline = time.monotonic() + 20
    while not probe.view and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await probe.close()
    assert probe.view, "the simulator published nothing in 20 s"
    return next(iter(probe.view))


async def test_a_bad_key_costs_no_good_key(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "4000")
    good = await published_key(server)

    # The wire: REFUSED names the two bad keys with why, the snapshot and ACK carry the good one.
    ws, hello = await raw(server)
    assert hello.protocol == codec.PROTOCOL_VERSION == 2
    iid = next(i.iid for i in hello.instruments if i.key == good)
    await ws.send(encode_request(Subscribe(req=5, keys=[good, MALFORMED, UNKNOWN])))
    answer = await until_ack(ws, 5)
    refused = [m for m in answer if isinstance(m, codec.Refused)]
    snapshots = [m for m in answer if isinstance(m, codec.Snapshot)]
    assert len(refused) == 1 and refused[0].req == 5, answer
    assert [(r.key, ErrorCode(r.code)) for r in refused[0].keys] == [
        (MALFORMED, ErrorCode.MALFORMED_KEY),
        (UNKNOWN, ErrorCode.UNKNOWN_SYMBOL),
    ]
    assert "venue" in refused[0].keys[0].reason and "dictionary" in refused[0].keys[1].reason
    assert [r.iid for s in snapshots for r in s.records] == [iid], "the good key's snapshot"
    ack = answer[-1]
    assert isinstance(ack, codec.Ack) and (ack.req, ack.subscribed) == (5, 1)
    # ... and its frames keep coming.
    deadline = time.monotonic() + 20
    while True:
        msg = codec.decode_message(await asyncio.wait_for(ws.recv(decode=False), 20))
        if isinstance(msg, codec.Frame) and any(r.iid == iid for r in msg.records):
            break
        assert time.monotonic() < deadline, "no frame for the good key"
    await ws.close()

    # The SDK: the Answer lists both; only the good key is held, rendered, restored.
    client = TerminalClient(server.url)
    await client.connect()
    got = await client.subscribe([good, MALFORMED, UNKNOWN])
    assert got.applied == [good] and got.subscribed == 1
    assert [(r.key, ErrorCode(r.code)) for r in got.refused] == [
        (MALFORMED, ErrorCode.MALFORMED_KEY),
        (UNKNOWN, ErrorCode.UNKNOWN_SYMBOL),
    ]
    assert client.held_keys == [good] and client.stats.refused_keys == 2
    deadline = time.monotonic() + 20
    while not any(q.key == good and q.source == "frame" for q in [client.view.get(good)] if q):
        assert time.monotonic() < deadline, "the good key never reached the glass by a frame"
        await asyncio.sleep(0.1)
    # Nothing applied: a typed error that still says, per key, why.
    with pytest.raises(KeysRefused, match="MALFORMED_KEY") as info:
        await client.subscribe([MALFORMED, UNKNOWN])
    assert len(info.value.answer.refused) == 2 and client.held_keys == [good]
    # Priority on a key not subscribed is refused for that key; the other is marked.
    other = next(i.key for i in hello.instruments if i.key != good)
    marked = await client.set_priority([good, other])
    assert marked.applied == [good] and marked.priority == 1
    assert [(r.key, ErrorCode(r.code)) for r in marked.refused] == [
        (other, ErrorCode.NOT_SUBSCRIBED)
    ]
    assert client.priority_keys == [good]
    assert client.stats.regressions == 0
    await client.close()


async def test_one_key_256_times_is_one_record_and_request_limits_answer(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start("--rate", "4000")
    good = await published_key(server)
    ws, hello = await raw(server)
    iid = next(i.iid for i in hello.instruments if i.key == good)

    # 256 copies of one key: one subscription, a snapshot with one record, nothing refused.
    await ws.send(encode_request(Subscribe(req=1, keys=[good] * 256)))
    answer = await until_ack(ws, 1)
    snapshots = [m for m in answer if isinstance(m, codec.Snapshot)]
    assert [r.iid for s in snapshots for r in s.records] == [iid]
    assert not any(isinstance(m, codec.Refused) for m in answer)
    assert isinstance(answer[-1], codec.Ack) and answer[-1].subscribed == 1

    # A field named twice: refused whole, naming it; the connection carries on.
    await ws.send(b"\x83\xa4type\xa9subscribe\xa3req\x02\xa3req\x03")
    (err,) = await until_ack(ws, 2)
    assert isinstance(err, codec.Error) and err.code == ErrorCode.INVALID_REQUEST
    assert "`req`" in err.message

    # Over the request limit but under the WebSocket message limit: TOO_LARGE, not a 1009.
    big = msgspec.msgpack.encode(
        {"type": "subscribe", "req": 4, "keys": [good], "pad": "x" * MAX_REQUEST_BYTES}
    )
    assert MAX_REQUEST_BYTES < len(big) < 16 * 1024
    await ws.send(big)
    (err,) = await until_ack(ws, 0)
    assert isinstance(err, codec.Error) and err.code == ErrorCode.TOO_LARGE
    await ws.send(encode_request(Subscribe(req=6, keys=[good])))
    answer = await until_ack(ws, 6)
    assert isinstance(answer[-1], codec.Ack) and answer[-1].subscribed == 1

    # Past the per-connection limit: the keys over it are refused, the ones under it applied.
    keys = [i.key for i in hello.instruments if i.key != good][:259]
    await ws.send(encode_request(Subscribe(req=7, keys=keys[:255])))
    assert (await until_ack(ws, 7))[-1] == codec.Ack(7, 256, 0)
    await ws.send(encode_request(Subscribe(req=8, keys=[keys[0], *keys[255:259]])))
    answer = await until_ack(ws, 8)
    (refused,) = [m for m in answer if isinstance(m, codec.Refused)]
    assert [r.key for r in refused.keys] == keys[255:259]
    assert {ErrorCode(r.code) for r in refused.keys} == {ErrorCode.TOO_MANY_SUBSCRIPTIONS}
    assert answer[-1] == codec.Ack(8, 256, 0)  # keys[0] held: re-hydrated, not refused
    await ws.close()


def test_tape_names_refused_keys_and_shows_the_others(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "4000")
    good = asyncio.run(published_key(server))
    done = subprocess.run(
        [
            sys.executable, "-m", "monotape", "tape", good, MALFORMED, UNKNOWN,
            "--url", server.bare_url, "--data-dir", str(server.data_dir), "--count", "3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stdout.splitlines()[1:] if ln.strip()]
    assert len(lines) == 3 and all(good in ln for ln in lines), done.stdout
    assert f"refused '{MALFORMED}'" in done.stderr and "MALFORMED_KEY" in done.stderr
    assert f"refused '{UNKNOWN}'" in done.stderr and "UNKNOWN_SYMBOL" in done.stderr
    assert "Traceback" not in done.stderr

    # Nothing subscribable: exit 2 with the reasons, not a tape of nothing.
    done = subprocess.run(
        [
            sys.executable, "-m", "monotape", "tape", MALFORMED, UNKNOWN,
            "--url", server.bare_url, "--data-dir", str(server.data_dir), "--count", "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "MALFORMED_KEY" in done.stderr and "UNKNOWN_SYMBOL" in done.stderr
    assert "Traceback" not in done.stderr
