"""The host's admin routes, the parts with no role process: a full collection runs in one
process after the other; the host's drain flag follows writers across restarts and a resume
names the writers it did not reach; the feed handlers' state answers GC pauses like every
role; the timeline names a role whose pauses do not decode; an unknown dashboard asks no role."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from starlette.requests import Request

from monotape.clock import SystemClock
from monotape.dashboards.panels import DASHBOARDS
from monotape.histograms.gc import GcMonitor
from monotape.platform.host.admin_routes import (
    Answers,
    HostDrain,
    RoleAsker,
    collect_one_at_a_time,
)
from monotape.platform.host.admin_views import HostViews, fetch_pauses
from monotape.platform.host.state import RoleView, handler_state
from monotape.platform.host.supervisor import ProcessTable
from monotape.platform.host.telemetry import RoleState


class _Asker:
    """A RoleAsker's face: answers from ``bodies`` by process, records how many asked at once."""

    def __init__(self, bodies: Mapping[str, dict[str, Any]], missing: Sequence[str] = ()) -> None:
        self.bodies = bodies
        self.missing = set(missing)
        self.in_flight = 0
        self.most = 0
        self.asked: list[tuple[tuple[str, ...], str]] = []

    def names(self, roles: Sequence[str]) -> list[str]:
        return [*self.bodies, *sorted(self.missing)]

    async def ask(
        self, names: Sequence[str], kind: str, what: str, params: object = None
    ) -> Answers:
        self.asked.append((tuple(names), what))
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)  # every one of a gather would be in flight here
        self.in_flight -= 1
        out = Answers()
        for n in names:
            if n in self.missing:
                out.why[n] = "stopped"
            else:
                out.bodies[n], out.statuses[n] = self.bodies[n], 200
        return out


async def test_a_full_collection_runs_in_one_process_at_a_time() -> None:
    fake = _Asker({f"writer-{i}": {"collected": i} for i in range(4)}, missing=["sequencer"])
    names = fake.names(())
    got = await collect_one_at_a_time(cast(RoleAsker, fake), names)
    assert fake.most == 1 and [a[0] for a in fake.asked] == [(n,) for n in names]
    assert list(got.bodies) == [f"writer-{i}" for i in range(4)]
    assert got.missing == ["sequencer"]


@given(
    st.lists(
        st.sampled_from(
            ["drain", "drain-none", "resume", "ready-0", "ready-1", "miss-1", "miss-all"]
        ),
        max_size=20,
    )
)
def test_the_drain_flag_follows_writers_across_restarts(events: list[str]) -> None:
    """A writer that becomes ready is told to drain exactly while the host is drained; a
    resume clears the flag and lists the writers it missed until they come back; a drain or a
    resume that reached no writer changes nothing (every writer is as it was)."""
    flag = HostDrain()
    drained = False
    unreached: set[str] = set()
    for event in events:
        if event == "drain":
            flag.drained(reached=2)
            drained = True
        elif event == "drain-none":
            flag.drained(reached=0)
        elif event == "resume":
            flag.resumed([], reached=2)
            drained, unreached = False, set()
        elif event == "miss-1":  # a resume that did not reach writer-1
            flag.resumed(["writer-1"], reached=1)
            drained, unreached = False, {"writer-1"}
        elif event == "miss-all":  # reached no writer: still drained, both owed a resume
            flag.resumed(["writer-0", "writer-1"], reached=0)
            unreached = {"writer-0", "writer-1"}
        else:
            name = "writer-" + event[-1]
            assert flag.on_writer_ready(name) is drained
            unreached.discard(name)
        assert flag.requested is drained and set(flag.unresumed) == unreached


async def test_readyz_asks_the_writers_for_the_drain_status_at_most_once_a_second() -> None:
    fake = _Asker({f"writer-{i}": {"drain": {"drained": True}} for i in range(2)})
    flag = HostDrain()
    flag.drained(reached=2)
    asker = cast(RoleAsker, fake)
    assert await flag.status(asker, now=100.0) == "drained"
    assert await flag.status(asker, now=100.5) == "drained"
    assert len(fake.asked) == 1  # the second within the second: no round to the writers
    assert await flag.status(asker, now=101.5) == "drained"
    assert len(fake.asked) == 2
    flag.drained(reached=2)  # a new drain asks afresh
    await flag.status(asker, now=101.6)
    assert len(fake.asked) == 3


async def test_a_feed_handler_answers_gc_pauses_and_the_nodes_gc_with_null_loop_lag() -> None:
    monitor = GcMonitor()
    monitor.callback("start", {"generation": 2})
    monitor.callback("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    state = handler_state(
        RoleState(asyncio.get_running_loop()),
        RoleView(SystemClock(), gc_monitor=monitor, source="replay"),
    )
    assert {"feeds", "gc", "gc_pauses"} <= set(state.states) and "gc-collect" in state.actions
    status, body = await state.states["gc_pauses"]({})
    assert status == 200 and len(msgspec.json.decode(body)["pauses"]) == 1
    status, body = await state.states["gc"]({"recent": "5"})
    gc_answer = msgspec.json.decode(body)
    assert status == 200 and gc_answer["loop_lag"] is None and "generations" in gc_answer["gc"]
    feeds = msgspec.json.decode((await state.states["feeds"]({}))[1])
    assert feeds["source"] == "replay"


async def test_pauses_that_do_not_decode_name_their_role_missing() -> None:
    fake = _Asker(
        {"writer-0": {"pauses": [], "left_out": 0}, "writer-1": {"pauses": "not a list"}},
        missing=["handler-0"],
    )
    got = await fetch_pauses(cast(RoleAsker, fake), 0, 10)
    assert list(got.by_process) == ["writer-0"]
    assert got.missing == ["handler-0", "writer-1"]
    assert [a[1] for a in fake.asked] == ["gc_pauses"]  # one round: no fallback to /state/gc


class _Observer:
    def __init__(self, run_dir: Path) -> None:
        self.table = ProcessTable([("writer-0", "writer")])
        self.run_dir = run_dir
        self.timeout_s = 1.0
        self.registry = CollectorRegistry()

    async def scrape(self) -> Any:
        raise AssertionError("not in this test")


def _request(uid: str) -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "path": f"/admin/dashboards/{uid}",
        "query_string": b"window=5m",
        "headers": [],
        "path_params": {"uid": uid},
    }
    return Request(scope)


async def test_an_unknown_dashboard_asks_no_role(tmp_path: Path) -> None:
    views = HostViews(_Observer(tmp_path), tmp_path / "hdr", None)
    fake = _Asker({"writer-0": {"pauses": []}})
    views.asker = cast(RoleAsker, fake)
    data = views.handlers()["/admin/dashboards/{uid}"]
    assert (await data(_request("nope"))).status_code == 404
    assert fake.asked == []
    assert (await data(_request(DASHBOARDS[0].uid))).status_code == 200
    assert [a[1] for a in fake.asked] == ["gc_pauses"]
