"""max_hz against the real node: a terminal at 5 Hz gets exactly the boundaries with
frame_no % 5 == 0, full records or deltas on exactly the version it holds (never a gap), and at
each of them holds what a 25 Hz terminal holds (docs/wire.md, rate). Frame numbers are counted,
never the time between them: the machine may be busy."""

from __future__ import annotations

import asyncio

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from monotape.platform.wire import codec
from monotape.platform.wire.requests import Rate, Subscribe, encode_request
from tests.conftest import RunningServer, ServerFactory, until

pytestmark = [pytest.mark.e2e]

Version = tuple[int, int]


class Glass:
    """One raw terminal, read all the time by its own task (a terminal that is not read stops
    answering pings and is closed by keepalive: never leave one unread while the other waits):
    what it holds per symbol after each FRAME it got, by frame number."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.held: dict[int, Version] = {}
        self.frames: dict[int, dict[int, Version]] = {}  # frame_no -> held after it
        self.deltas = 0
        self.full = 0
        self.answers: dict[int, codec.ServerMessage] = {}  # req -> its ACK or ERROR
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            self.apply(codec.decode_message(await self.ws.recv(decode=False)))

    async def request(self, data: bytes, req: int) -> None:
        await self.ws.send(data)
        await until(lambda: req in self.answers or self.reader.done(), f"answer {req}", 30)
        if self.reader.done():
            self.reader.result()  # what ended the reader (an assertion, a close) is the failure
        answer = self.answers[req]
        assert isinstance(answer, codec.Ack), f"request {req} refused: {answer}"

    def apply(self, msg: codec.ServerMessage) -> None:
        if isinstance(msg, codec.Ack | codec.Error):
            self.answers[msg.req] = msg
        elif isinstance(msg, codec.Snapshot):
            for rec in msg.records:
                self.held[rec.iid] = (rec.epoch, rec.seq)
        elif isinstance(msg, codec.Frame):
            for rec in msg.records:
                if rec.has_base:
                    self.deltas += 1
                    assert self.held.get(rec.iid) == (rec.base_epoch, rec.base_seq), "a gap"
                else:
                    self.full += 1
                version = (rec.epoch, rec.seq)
                assert version >= self.held.get(rec.iid, (0, 0)), "older than held"
                self.held[rec.iid] = version
            self.frames[msg.frame_no] = dict(self.held)

    async def wait_frames(self, frames: int) -> None:
        # generous: at load average ~30 on 2 cores the node once took over 60 s for 110 frames
        await until(lambda: len(self.frames) >= frames or self.reader.done(), "frames", 180)
        if self.reader.done():
            self.reader.result()

    async def close(self) -> None:
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        await self.ws.close()


async def _glass(server: RunningServer) -> Glass:
    ws = await websockets.connect(
        server.bare_url,
        additional_headers={"Authorization": f"Bearer {server.token}"},
        compression=None,
        max_size=None,
        open_timeout=20,
    )
    hello = codec.decode_message(await ws.recv(decode=False))
    assert isinstance(hello, codec.Hello)
    return Glass(ws)


async def test_a_5_hz_terminal_gets_every_fifth_boundary_never_older_than_25_hz(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start("--rate", "20000")
    fast = await _glass(server)
    slow = await _glass(server)
    probe = await websockets.connect(server.url, compression=None)
    hello = codec.decode_message(await probe.recv(decode=False))
    await probe.close()
    assert isinstance(hello, codec.Hello)
    keys = [i.key for i in hello.instruments[:120]]  # busy enough that every frame moves some
    # the slow one takes its rate before it subscribes: full records in its first frame, then
    # deltas for what changed once since its previous boundary (``Glass.apply`` checks each base)
    await slow.request(encode_request(Rate(req=1, max_hz=5)), 1)
    await fast.request(encode_request(Subscribe(req=1, keys=keys)), 1)
    await slow.request(encode_request(Subscribe(req=2, keys=keys)), 2)

    await fast.wait_frames(110)  # ~100 frames of the 25 Hz terminal after the subscribes
    for glass in (fast, slow):
        if glass.reader.done():  # its checks failed or it was closed: that is the failure
            glass.reader.result()
            raise AssertionError("a terminal's reader ended")
        await glass.close()

    got = sorted(slow.frames)
    assert len(got) >= 10, f"the 5 Hz terminal got {len(got)} frames"
    assert all(f % 5 == 0 for f in got), f"off-boundary frames: {[f for f in got if f % 5]}"
    assert slow.full > 0 and slow.deltas > 0  # reused 25 Hz records, each on the base it holds
    assert fast.deltas > 0
    # exactly the 25 Hz terminal's boundaries with frame_no % 5 == 0, over the span both saw
    lo, hi = got[0], min(got[-1], max(fast.frames))
    expected = [f for f in sorted(fast.frames) if lo <= f <= hi and f % 5 == 0]
    assert [f for f in got if f <= hi] == expected
    # at each of them, never older than the 25 Hz terminal (here: the same versions)
    for f in expected:
        for iid, version in fast.frames[f].items():
            assert slow.frames[f].get(iid, (0, 0)) >= version, f"frame {f}, iid {iid}"
        assert slow.frames[f] == fast.frames[f]
