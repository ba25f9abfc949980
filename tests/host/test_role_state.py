"""A role's loopback state port (host/telemetry.py): /metrics as before, ``GET /state/<name>``
and ``POST /action/<name>`` run on the role's loop for a holder of the host's secret only
(403 otherwise, 503 past ``MAX_IN_FLIGHT``), every failure an answer (never a dead server
thread), and the host's asker names a role that does not answer."""

from __future__ import annotations

import asyncio
import stat
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import msgspec
import pytest
from prometheus_client import CollectorRegistry, Counter

from monotape.platform.host import telemetry
from monotape.platform.host.admin_routes import RoleAsker, ask_role
from monotape.platform.host.supervisor import ProcessTable
from monotape.platform.host.telemetry import RoleState, serve_metrics, write_secret


async def _served(tmp_path: Path, name: str = "writer-0") -> int:
    registry = CollectorRegistry()
    Counter("monotape_test_things", "things", registry=registry).inc()
    state = RoleState(asyncio.get_running_loop())
    loop_thread: list[bool] = []

    async def hello(params: Mapping[str, str]) -> tuple[int, bytes]:
        # on the role's loop: the state is read where it lives
        loop_thread.append(asyncio.get_running_loop() is state.loop)
        return 200, msgspec.json.encode({"hello": params.get("who", ""), "on_loop": loop_thread})

    async def drain(params: Mapping[str, str]) -> tuple[int, bytes]:
        return 202, b'{"draining": true}'

    async def broken(params: Mapping[str, str]) -> tuple[int, bytes]:
        raise RuntimeError("a bug")

    async def stuck(params: Mapping[str, str]) -> tuple[int, bytes]:
        await asyncio.sleep(30)
        return 200, b"{}"

    async def huge(params: Mapping[str, str]) -> tuple[int, bytes]:
        return 200, b" " * (telemetry.MAX_STATE_BYTES + 1)

    state.states.update({"hello": hello, "broken": broken, "stuck": stuck, "huge": huge})
    state.actions["drain"] = drain
    if not telemetry.secret_file(tmp_path).exists():
        write_secret(tmp_path)  # the host's, before it starts a role
    return await asyncio.to_thread(serve_metrics, registry, tmp_path, name, state)


def _secret(tmp_path: Path) -> str:
    return telemetry.read_secret(tmp_path)


async def test_state_and_actions_answer_from_the_roles_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry, "STATE_TIMEOUT_S", 0.3)
    port = await _served(tmp_path)
    key = _secret(tmp_path)
    status, body = await ask_role(port, "GET", "/state/hello?who=sre", 10, key)
    assert (status, body["hello"], body["on_loop"]) == (200, "sre", [True])
    assert (await ask_role(port, "POST", "/action/drain", 10, key))[0] == 202
    assert (await ask_role(port, "POST", "/state/hello", 10, key))[0] == 405
    assert (await ask_role(port, "GET", "/state/nope", 10, key))[0] == 404
    status, body = await ask_role(port, "GET", "/state/broken", 10, key)
    assert status == 500 and "RuntimeError" in body["error"]
    assert (await ask_role(port, "GET", "/state/stuck", 10, key))[0] == 504
    assert (await ask_role(port, "GET", "/state/huge", 10, key))[0] == 413
    long_query = "/state/hello?who=" + "x" * telemetry.MAX_QUERY_BYTES
    assert (await ask_role(port, "GET", long_query, 10, key))[0] == 400
    # the metrics beside it, unchanged
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
    text = (await reader.read()).decode()
    writer.close()
    assert "monotape_test_things_total 1.0" in text


async def test_the_asker_names_who_did_not_answer(tmp_path: Path) -> None:
    await _served(tmp_path, "writer-0")
    table = ProcessTable([("writer-0", "writer"), ("writer-1", "writer")])
    for name in table.slots:  # both "running": writer-1 has no port file
        table.started(name, 1234, 0, 0)
        table.mark_ready(name)
    # the asker reads the host's secret from the run dir: the roles answer it
    got = await RoleAsker(table, tmp_path, 5).ask(["writer-0", "writer-1"], "state", "hello")
    assert list(got.bodies) == ["writer-0"] and got.missing == ["writer-1"]
    got = await RoleAsker(table, tmp_path, 5).ask(["writer-0"], "state", "broken")
    assert got.missing == ["writer-0"] and got.why["writer-0"].startswith("500")


async def test_state_and_actions_need_the_hosts_secret(tmp_path: Path) -> None:
    """127.0.0.1 is every user of the machine: no secret or a wrong one is 403, on /state and
    /action alike; /metrics stays open; the secret file is this user's only."""
    port = await _served(tmp_path)
    key = _secret(tmp_path)
    assert len(key) == 64
    assert stat.S_IMODE(telemetry.secret_file(tmp_path).stat().st_mode) == 0o600
    for method, path in (("GET", "/state/hello"), ("POST", "/action/drain")):
        status, body = await ask_role(port, method, path, 10)
        assert status == 403 and key not in str(body)
        assert (await ask_role(port, method, path, 10, "0" * 64))[0] == 403
        assert (await ask_role(port, method, path, 10, key[:-1]))[0] == 403
    assert (await ask_role(port, "GET", "/state/hello", 10, key))[0] == 200
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
    assert b"200 OK" in (await reader.read())[:20]
    writer.close()


async def test_a_role_without_a_secret_refuses_everyone(tmp_path: Path) -> None:
    state = RoleState(asyncio.get_running_loop())

    async def hello(params: Mapping[str, str]) -> tuple[int, bytes]:
        return 200, b"{}"

    state.states["hello"] = hello
    port = await asyncio.to_thread(serve_metrics, CollectorRegistry(), tmp_path, "w", state)
    assert (await ask_role(port, "GET", "/state/hello", 10))[0] == 403
    assert (await ask_role(port, "GET", "/state/hello", 10, "anything"))[0] == 403


async def test_past_max_in_flight_a_question_is_503(tmp_path: Path) -> None:
    state = RoleState(asyncio.get_running_loop())
    release = asyncio.Event()
    entered: list[int] = []

    async def slow(params: Mapping[str, str]) -> tuple[int, bytes]:
        entered.append(1)
        await release.wait()
        return 200, b"{}"

    state.states["slow"] = slow
    write_secret(tmp_path)
    key = _secret(tmp_path)
    port = await asyncio.to_thread(serve_metrics, CollectorRegistry(), tmp_path, "w", state)
    held = [
        asyncio.create_task(ask_role(port, "GET", "/state/slow", 60, key))
        for _ in range(telemetry.MAX_IN_FLIGHT)
    ]
    for _ in range(6000):  # until every one is on the loop (generous: both cores may be busy)
        if len(entered) == telemetry.MAX_IN_FLIGHT:
            break
        await asyncio.sleep(0.01)
    assert len(entered) == telemetry.MAX_IN_FLIGHT
    status, body = await ask_role(port, "GET", "/state/slow", 60, key)
    assert status == 503 and "busy" in body["error"]
    release.set()
    assert [s for s, _ in await asyncio.gather(*held)] == [200] * telemetry.MAX_IN_FLIGHT
    assert (await ask_role(port, "GET", "/state/slow", 60, key))[0] == 200


def test_a_closed_loop_answers_503_without_a_traceback() -> None:
    """A request after the role's loop closed (it is stopping): 503, no exception, no
    never-awaited coroutine."""
    loop = asyncio.new_event_loop()
    state = RoleState(loop)

    async def hello(params: Mapping[str, str]) -> tuple[int, bytes]:
        return 200, b"{}"

    state.states["hello"] = hello
    loop.close()
    got: list[tuple[int, bytes]] = []
    worker = threading.Thread(target=lambda: got.append(state.answer("GET", "/state/hello", "")))
    worker.start()
    worker.join(60)
    assert got and got[0][0] == 503


async def _raw(port: int, key: str, deadline: str) -> tuple[int, bytes]:
    """A POST /action/drain with the host's secret and ``deadline`` as the deadline header."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /action/drain HTTP/1.0\r\n{telemetry.SECRET_HEADER}: {key}\r\n"
        f"{telemetry.DEADLINE_HEADER}: {deadline}\r\nContent-Length: 0\r\n\r\n".encode()
    )
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def _draining_role(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> tuple[int, str, list[int]]:
    """A role on ``loop`` whose drain action counts its runs: (port, the host's secret, runs)."""
    state = RoleState(loop)
    drained: list[int] = []

    async def drain(params: Mapping[str, str]) -> tuple[int, bytes]:
        drained.append(1)
        return 202, b"{}"

    state.actions["drain"] = drain
    write_secret(tmp_path)
    port = await asyncio.to_thread(serve_metrics, CollectorRegistry(), tmp_path, "w", state)
    return port, _secret(tmp_path), drained


async def test_a_question_past_its_deadline_or_with_a_bad_one_does_not_run(tmp_path: Path) -> None:
    port, key, drained = await _draining_role(tmp_path, asyncio.get_running_loop())
    past = time.monotonic_ns() - 1
    status, body = await _raw(port, key, str(past))
    assert status == 504 and b"deadline" in body and drained == []
    for bad in ("soon", "-5", "1e9", "9" * 21, ""):
        status, body = await _raw(port, key, bad)
        assert status == 400 and telemetry.DEADLINE_HEADER.encode() in body, bad
    assert drained == []
    status, _ = await _raw(port, key, str(time.monotonic_ns() + 60 * 10**9))
    assert status == 202 and drained == [1]
    assert (await ask_role(port, "POST", "/action/drain", 10, key))[0] == 202  # sends its own
    assert drained == [1, 1]


async def test_an_action_the_host_gave_up_on_does_not_run_when_the_role_resumes(
    tmp_path: Path,
) -> None:
    """The role's loop is held (a stopped role) while the host asks for a drain with a short
    wait; the host gives up. When the loop runs again, the drain must not happen: the host may
    already have undone it (a resume that found nothing to resume)."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        port, key, drained = await _draining_role(tmp_path, loop)
        held = threading.Event()
        loop.call_soon_threadsafe(held.wait, 30.0)  # the role's loop stops turning
        with pytest.raises(TimeoutError):
            await ask_role(port, "POST", "/action/drain", 0.5, key)
        held.set()  # it turns again: the queued question reaches the loop past its deadline
        done = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
        await asyncio.wrap_future(done)
        await asyncio.sleep(0.2)
        assert drained == []
        assert (await ask_role(port, "POST", "/action/drain", 10, key))[0] == 202
        assert drained == [1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()
