"""Poison ticks through the real `monotape run` (issue 10, A1).

One out-of-range value used to be accepted at the boundary and raise in the encoder of the first
frame with a subscriber: the frame loop died, every terminal was disconnected, the node exited 1.
Here the poison comes from a replay file and from a batch published on a real NATS bus; the node
must refuse it, count it in ``monotape_ticks_rejected_total{venue,reason}`` and keep serving
frames to a terminal subscribed to the very symbol the poison names.
"""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest

from monotape import metric_names as m
from monotape.platform.sdk.client import TerminalClient
from monotape.platform.wire.batch import batch_of
from tests.conftest import RunningServer, ServerFactory, until

pytestmark = [pytest.mark.e2e]

START_DELAY_S = 2.0
TICK_EVERY_MS = 20
DURATION_MS = 12_000  # outlasts the test by seconds, even on a loaded machine
POISON_MS = {1_000: "bid", 1_500: "update_id", 2_000: "venue_ts_ns"}
MORE_FRAMES = 10  # frames a terminal must still get after the poison (about 0.4 s at 25 Hz)
BASE_TS = 1_764_460_800_000_000_000
# Not about admission: a busy machine must not shed the test's own terminal with a 503.


def _poison_replay(path: Path) -> Path:
    """Two symbols ticking every 20 ms for 12 s; three poison ticks for XNAS:AAPL on the way."""
    header = {
        "instruments": [
            {"key": "XNAS:AAPL", "decimals": 4, "tick_size": "0.0001"},
            {"key": "XNAS:MSFT", "decimals": 2, "tick_size": "0.01"},
        ]
    }
    lines = [json.dumps(header)]
    for n, t in enumerate(range(0, DURATION_MS, TICK_EVERY_MS)):
        for symbol in ("AAPL", "MSFT"):
            rec: dict[str, object] = {
                "t_ms": t, "venue": "XNAS", "symbol": symbol, "update_id": 1_000 + n,
                "venue_ts_ns": BASE_TS + t * 1_000_000, "epoch": 1,
                "bid": f"{100 + n % 50}.00", "ask": f"{100 + n % 50}.02",
                "last": f"{100 + n % 50}.01", "size": 100,
            }  # fmt: skip
            lines.append(json.dumps(rec))
        field = POISON_MS.get(t)
        if field is not None:
            poison: dict[str, object] = {
                "t_ms": t, "venue": "XNAS", "symbol": "AAPL", "update_id": 1_000 + n + 1,
                "venue_ts_ns": BASE_TS + t * 1_000_000 + 1, "epoch": 1,
                "bid": "100.00", "ask": "100.02", "last": "100.01", "size": 100,
            }  # fmt: skip
            if field == "bid":  # valid JSON, valid decimal: overflows int64 once scaled by 10**4
                poison["bid"] = "999999999999999.0000"
            elif field == "update_id":
                poison["update_id"] = 2**64
            else:
                poison["venue_ts_ns"] = 2**64 + 5
            lines.append(json.dumps(poison))
    path.write_text("\n".join(lines) + "\n")
    return path


async def _frames_keep_coming(server: RunningServer, client: TerminalClient) -> None:
    """Wait (as long as a busy machine needs) for MORE_FRAMES more frames, or for the node or
    the terminal to go: counted frames, never a fixed sleep."""
    mid = client.stats.frames
    await until(
        lambda: (
            client.stats.frames > mid + MORE_FRAMES
            or not client.connected
            or server.proc.poll() is not None
        ),
        "frames after the poison",
    )
    assert server.proc.poll() is None, "".join(server.output[-40:])
    assert client.connected, "the terminal was disconnected"
    assert client.stats.frames > mid + MORE_FRAMES, "frames stopped after the poison"


def _aapl_seq(client: TerminalClient) -> int:
    quote = client.view.get("XNAS:AAPL")
    return quote.seq if quote is not None else 0


def _refused(server: RunningServer, venue: str, reasons: set[str]) -> bool:
    return server.proc.poll() is not None or reasons <= set(_rejected(server, venue))


def _batches_refused(server: RunningServer) -> set[str]:
    return {
        dict(labels)["reason"]
        for (name, labels), value in server.metrics().items()
        if name == m.BATCHES_REFUSED and value > 0
    }


def _rejected(server: RunningServer, venue: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (name, labels), value in server.metrics().items():
        d = dict(labels)
        if name == m.TICKS_REJECTED and d.get("venue") == venue:
            out[d["reason"]] = value
    return out


async def test_a_poison_replay_tick_is_refused_and_frames_keep_coming(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    replay = _poison_replay(tmp_path / "poison.ndjson")
    server = server_factory.start(
        "--replay", str(replay), "--replay-start-delay", str(START_DELAY_S)
    )
    client = TerminalClient(server.url)
    await client.connect()
    await client.subscribe(["XNAS:AAPL", "XNAS:MSFT"])
    # Past every poison tick (1.0-2.0 s into the file, refused when the file was loaded): the
    # glass shows an AAPL update id above the last poison's, however long a busy machine takes.
    past_poison = 1_000 + max(POISON_MS) // TICK_EVERY_MS + 1
    await until(
        lambda: _aapl_seq(client) > past_poison or server.proc.poll() is not None,
        "the replay past the poison",
        60.0,
    )
    aapl_mid = _aapl_seq(client)
    await _frames_keep_coming(server, client)
    await until(
        lambda: _aapl_seq(client) > aapl_mid or not client.connected,
        "the poisoned symbol moving again",
    )
    assert _aapl_seq(client) > aapl_mid, "the poisoned symbol stopped moving"
    assert client.view["XNAS:AAPL"].bid < 10**12  # the poison price never reached the glass
    assert client.stats.regressions == 0 and client.stats.gaps == 0
    rejected = _rejected(server, "XNAS")
    assert rejected.get("price_out_of_range") == 1, rejected
    assert rejected.get("seq_out_of_range") == 1, rejected
    assert rejected.get("timestamp_out_of_range") == 1, rejected
    assert server.metric_sum(m.STAGE_FAILURES) == 0  # refused at the door, nothing failed later
    log = "".join(server.output)
    assert "poison.ndjson line" in log  # the refusal names the line
    await client.close()


def _batch(venue: str, iid: int, seq: int, ts: int, epoch: int = 1_000_000) -> bytes:
    """One tick as the bus carries it (a columnar batch, docs/wire.md "Tick batches"), with a
    version far above anything live, so the sequencer would apply it if the gate let it by."""
    cols = {
        "seq": [seq], "update_id": [seq], "bid": [100], "ask": [101], "last": [100],
        "size": [1], "venue_ts": [ts], "recv_ts": [1], "iid": [iid], "flags": [1],
    }  # fmt: skip
    return batch_of(venue, "X", epoch, 0, cols).buffer


async def test_a_poison_batch_on_the_nats_bus_is_refused(
    server_factory: ServerFactory, nats_url: str
) -> None:
    server = server_factory.start("--rate", "8000", "--nats", nats_url)
    client = TerminalClient(server.url)
    hello = await client.connect()
    first = hello.instruments[0]
    keys = [i.key for i in hello.instruments[:60]]
    await client.subscribe(keys)
    await until(lambda: client.stats.frames > 0, "a first frame")

    ts = 1_764_460_800_000_000_000
    unknown = _batch(first.venue, 65_000, 5, ts)  # no such instrument
    bad_ts = _batch(first.venue, first.iid, 6, -1)  # a venue timestamp before 1970
    good = _batch(first.venue, first.iid, 7, ts)
    torn = good[:-2]
    future = bytes([*good[:3], 9, *good[4:]])  # a format version this node does not read
    nc = await nats.connect(nats_url)
    try:
        subject = f"md.{first.venue}.batch"
        for payload in (unknown, bad_ts, torn, future, b"short", b"not a batch at all" * 5):
            await nc.publish(subject, payload)
        await nc.flush()
    finally:
        await nc.close()
    poisons = {"unknown_iid", "timestamp_out_of_range"}
    await until(lambda: _refused(server, first.venue, poisons), "the poison ticks refused")
    refusals = {"length_mismatch", "unknown_version", "short", "not_a_batch"}
    await until(
        lambda: server.proc.poll() is not None or refusals <= _batches_refused(server),
        "the buffers that are not batches refused whole",
    )
    await _frames_keep_coming(server, client)
    assert client.view[first.key].epoch < 1_000_000  # the poison never reached the glass
    rejected = _rejected(server, first.venue)
    assert rejected.get("unknown_iid") == 1, rejected
    assert rejected.get("timestamp_out_of_range") == 1, rejected
    log = "".join(server.output)
    assert "md." in log and "batch_refused" in log  # the refusals name the subject
    await client.close()
