"""wire/framing.py: RFC 6455 server frames, parsed back by websockets' own frame parser."""

from __future__ import annotations

import asyncio

import pytest
from websockets.frames import Frame as WsFrame
from websockets.frames import Opcode
from websockets.streams import StreamReader

from monotape.platform.wire.framing import ws_binary_frame


async def _parse(data: bytes) -> WsFrame:
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    gen = WsFrame.parse(reader.read_exact, mask=False)
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        frame: WsFrame = stop.value
        return frame


@pytest.mark.parametrize("n", [0, 125, 126, 65535, 65536])
def test_ws_binary_frame_parses_with_websockets(n: int) -> None:
    payload = bytes(i % 251 for i in range(n))
    framed = ws_binary_frame(payload)
    frame = asyncio.run(_parse(framed))
    assert frame.opcode is Opcode.BINARY and frame.fin and frame.data == payload
    assert len(framed) - n == {0: 2, 125: 2, 126: 4, 65535: 4, 65536: 10}[n]
