"""The first five minutes, as a new user lives them: the real CLI, run from another directory,
against the real `monotape run` on loopback.

One node serves most checks (it costs seconds to start); every client command runs as a
subprocess whose working directory is not the node's, with no MONOTAPE_* variable set unless
the check is about one. Every output is searched for a JWT ("eyJ": a token is never printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monotape.platform.auth import ensure_dev_keys
from monotape.platform.sdk.client import TerminalClient
from tests.conftest import CLIENT_COMMANDS, NO_LAG_SHEDDING, RunningServer, mint, start_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JWT = "eyJ"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONOTAPE_")}
    return {**env, **extra}


def monotape(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monotape", *args],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_line(err: str) -> str:
    """The message line: a refusal is one line; JSON log lines may precede it."""
    assert "Traceback" not in err, err
    lines = [x for x in err.strip().splitlines() if not x.startswith("{")]
    assert len(lines) == 1, err
    return lines[0]


def http(
    server: RunningServer, path: str, token: str | None = None, method: str = "GET"
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.admin_port}{path}", method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    data = tmp_path_factory.mktemp("node") / "state"
    server = start_server(data, "--rate", "3000")
    yield server
    server.stop()


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    where = tmp_path / "elsewhere"
    where.mkdir()
    return where


def test_the_banner_hint_works_as_printed_from_another_directory(
    node: RunningServer, elsewhere: Path
) -> None:
    banner = "".join(node.output)
    hint = re.search(r"\(try: (\S*monotape tape [^)]*)\)", banner)
    assert hint is not None, banner
    words = shlex.split(hint.group(1))
    assert words[2:4] == ["--data-dir", str(node.data_dir)]  # not the default: it says so
    # exactly as printed: the venv's script by its path when the shell would not find it
    out = subprocess.run(
        [*words, "--count", "3"],
        cwd=elsewhere,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 4  # the header and three quotes
    assert JWT not in out.stdout + out.stderr


def test_every_client_takes_the_token_the_same_way_and_never_prints_it(
    node: RunningServer, elsewhere: Path
) -> None:
    dd = ("--data-dir", str(node.data_dir))
    token = mint(node.data_dir, sub="desk")
    outputs: list[str] = []

    def ok(*args: str, env: dict[str, str] | None = None) -> None:
        out = monotape(*args, cwd=elsewhere, env=env)
        outputs.append(out.stdout + out.stderr)
        assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])

    # tape: minted from the data dir (whose endpoints give the ephemeral port), --token, env.
    ok("tape", *dd, "XNAS:AAPL", "--count", "1")
    ok("tape", "--url", node.bare_url, "--token", token, "XNAS:AAPL", "--count", "1")
    ok(
        "tape",
        "--url",
        node.bare_url,
        "XNAS:AAPL",
        "--count",
        "1",
        env=clean_env(MONOTAPE_TOKEN=token),
    )
    # load churn: before, it sent no token at all and died with a 401 traceback.
    churn = ("load", "churn", "--duration-s", "2", "--arrival-rate-per-s", "10", "--drain-s", "5")
    ok(*churn, *dd)
    ok(*churn, "--url", node.bare_url, "--token", token)
    ok(*churn, "--url", node.bare_url, env=clean_env(MONOTAPE_TOKEN=token))
    report = json.loads(outputs[-1][: outputs[-1].rindex("}") + 1])
    assert report["opened"] > 0 and report["errors"] == 0
    # load storm / load replay: the same three ways.
    storm = ("load", "storm", "--terminals", "8", "--duration", "3", "--open-at", "1")
    ok(*storm, "--processes", "1", "--drain-s", "5", *dd)
    trace = elsewhere / "tiny.json"
    trace.write_text(
        json.dumps(
            {
                "version": 1,
                "name": "tiny",
                "connects": [2, 4, 0],
                "disconnects": [0, 0, 0],
                "cardinality": [{"size": 3, "weight": 1.0}],
                "abrupt_fraction": 0.0,
            }
        )
    )
    replay = ("load", "replay", str(trace), "--processes", "1", "--drain-s", "5")
    ok(
        *replay,
        "--url",
        node.bare_url,
        "--token",
        token,
        "--admin-url",
        f"http://127.0.0.1:{node.admin_port}",
    )
    ok(*replay, *dd, env=clean_env(MONOTAPE_TOKEN=token))
    for text in outputs:
        assert JWT not in text, text[-3000:]


@CLIENT_COMMANDS
def test_a_key_from_another_data_dir_is_refused_with_the_reason(
    command: tuple[str, ...], node: RunningServer, elsewhere: Path
) -> None:
    # load storm / replay used to end in an InvalidStatus traceback; churn gave the reason but
    # not which key. Every client now says it in the same words.
    ensure_dev_keys(elsewhere / ".monotape")  # a data dir of its own, with a key no node knows
    out = monotape(*command, "--url", node.bare_url, cwd=elsewhere)
    assert out.returncode == 2, out.stderr[-2000:]
    line = last_line(out.stderr)
    prog = " ".join(command[:2]) if command[0] == "load" else "tape"
    assert line.startswith(f"monotape {prog}: the node refused the token"), line
    assert "HTTP 401" in line and "bad signature" in line  # the node's reason
    assert str(elsewhere / ".monotape") in line and "--data-dir" in line  # which key, and how
    assert JWT not in out.stdout + out.stderr


def test_symbols_from_the_running_node_with_prices(node: RunningServer, elsewhere: Path) -> None:
    out = monotape("symbols", "--data-dir", str(node.data_dir), "xnas:aa*", "--json", cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    rows = {r["key"]: r for r in body["symbols"]}
    assert "XNAS:AAPL" in rows and all(k.startswith("XNAS:AA") for k in rows)
    row = rows["XNAS:AAPL"]
    assert row["price_scale"] == 10 ** row["price_decimals"]
    cur = row["current"]
    assert cur["price"]["bid"] == pytest.approx(cur["bid"] / row["price_scale"])
    assert "from the node at" in out.stderr and JWT not in out.stdout + out.stderr


def test_hdr_report_on_an_empty_window_says_so(elsewhere: Path) -> None:
    (elsewhere / ".monotape" / "hdr").mkdir(parents=True)
    out = monotape("hdr", "report", "--stage", "write", "--last", "40s", cwd=elsewhere)
    assert out.returncode == 0
    assert "no write values" in out.stdout and "p99" not in out.stdout


def test_a_drain_ends_the_tape_with_its_reason_and_resume_takes_terminals_again(
    node: RunningServer, elsewhere: Path
) -> None:
    admin = mint(node.data_dir, admin=True)
    dd = ("--data-dir", str(node.data_dir))
    tape = subprocess.Popen(
        [sys.executable, "-m", "monotape", "tape", *dd, "XNAS:AAPL", "ARCX:MSFT"],
        cwd=elsewhere,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tape.stdout is not None
        tape.stdout.readline()  # the header
        tape.stdout.readline()  # a first quote: the session is up
        code, status = http(node, "/admin/drain", admin, "POST")
        assert code == 202 and status["total"] >= 1
        _, err = tape.communicate(timeout=60)
    finally:
        if tape.poll() is None:
            tape.kill()
    assert tape.returncode == 1  # the node ended it: not a success
    assert "drained" in last_line(err)

    for _ in range(100):  # the drain finishes; the node stays out of rotation
        code, body = http(node, "/readyz")
        if body.get("status") == "drained":
            break
        time.sleep(0.1)
    assert (code, body["status"]) == (503, "drained")
    out = monotape("tape", *dd, "XNAS:AAPL", "--count", "1", cwd=elsewhere)
    assert out.returncode == 2
    line = last_line(out.stderr)
    assert "HTTP 503" in line and "/admin/resume" in line

    code, body = http(node, "/admin/resume", admin, "POST")
    assert code == 200 and body["resumed"] is True
    assert http(node, "/readyz")[0] == 200
    out = monotape("tape", *dd, "XNAS:AAPL", "--count", "1", cwd=elsewhere)
    assert out.returncode == 0, out.stderr


def test_tape_says_the_token_expired_and_exits_non_zero(
    node: RunningServer, elsewhere: Path
) -> None:
    short = mint(node.data_dir, ttl_s=10)  # room for a slow interpreter start on a busy box
    out = monotape("tape", "--url", node.bare_url, "--token", short, "XNAS:AAPL", cwd=elsewhere)
    assert out.returncode == 1
    assert "token expired" in last_line(out.stderr)
    assert JWT not in out.stdout + out.stderr


def test_the_node_writes_one_log_format(node: RunningServer) -> None:
    # stderr is not a terminal here: every log line is JSON, uvicorn's and websockets' included
    # (before, uvicorn wrote "INFO:     ..." lines of its own).
    logged = [x for x in node.output if x.startswith("{")]
    assert logged and all(json.loads(x)["event"] for x in logged)
    assert not any(x.startswith(("INFO:", "WARNING:", "ERROR:")) for x in node.output)
    assert all(JWT not in x for x in node.output)


# -- mistakes at start -------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--ws-port", "--admin-port"])
def test_a_port_in_use_is_one_line_naming_it(flag: str, elsewhere: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        other = "--admin-port" if flag == "--ws-port" else "--ws-port"
        out = monotape(
            "run", flag, str(port), other, "0", "--data-dir", "state", "--duration", "5",
            cwd=elsewhere,
        )  # fmt: skip
    assert out.returncode == 2
    line = last_line(out.stderr)
    assert f"127.0.0.1:{port}" in line and flag in line and "in use" in line
    assert "monotape is running" not in out.stdout


def test_a_second_run_on_a_data_dir_in_use_is_refused(node: RunningServer, elsewhere: Path) -> None:
    # Two nodes on one data dir would share epochs, dev keys and HDR interval logs.
    out = monotape(
        "run", "--single-process", "--data-dir", str(node.data_dir), "--ws-port", "0",
        "--admin-port", "0", "--duration", "5", cwd=elsewhere,
    )  # fmt: skip
    assert out.returncode == 2
    line = last_line(out.stderr)
    assert f"data dir {Path(node.data_dir).resolve()} is in use" in line
    assert f"pid {node.proc.pid}" in line
    assert "monotape is running" not in out.stdout
    assert node.proc.poll() is None  # the first one is untouched


def test_a_malformed_replay_is_one_line(elsewhere: Path) -> None:
    bad = elsewhere / "bad.ndjson"
    bad.write_text('{"t_ms": 0, "venue": "XNAS"\n')
    out = monotape(
        "run", "--replay", str(bad), "--ws-port", "0", "--admin-port", "0", cwd=elsewhere
    )
    assert out.returncode == 2
    line = last_line(out.stderr)
    assert "bad.ndjson" in line and "line 1" in line


# -- Ctrl-C ------------------------------------------------------------------------------------
def test_ctrl_c_says_what_the_drain_does_and_a_second_one_stops_at_once(tmp_path: Path) -> None:
    # 24 terminals, one closed every 2 s: a drain of ~46 s unless hurried.
    env = {
        **NO_LAG_SHEDDING,  # a node started here, not through start_server
        "MONOTAPE_SERVER__DRAIN_INTERVAL_S": "2",
        "MONOTAPE_SERVER__DRAIN_FRACTION": "0.04",
    }
    server = start_server(tmp_path / "state", "--rate", "2000", env=env)

    async def connect() -> list[TerminalClient]:
        clients = [TerminalClient(server.url) for _ in range(24)]
        await asyncio.gather(*(c.connect() for c in clients))
        return clients

    loop = asyncio.new_event_loop()
    try:
        clients = loop.run_until_complete(connect())

        def seen(text: str, timeout: float = 30) -> str:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for line in list(server.output):
                    if text in line:
                        return line
                time.sleep(0.05)
            raise AssertionError(f"never printed {text!r}:\n" + "".join(server.output[-30:]))

        server.proc.send_signal(signal.SIGINT)
        first = seen("stopping (SIGINT)")
        assert "draining 24 terminals" in first and "Ctrl-C again" in first
        seen("draining: ")  # progress in words, once a second
        server.proc.send_signal(signal.SIGINT)
        seen("stopping now")
        server.proc.wait(timeout=30)  # far less than the drain's ~46 s
        assert server.proc.returncode == 0
        stopped = json.loads(seen('"event": "stopped"'))
        # Most terminals were closed by the hurried stop, not by the drain.
        assert stopped["disconnects"].get("server_shutdown", 0) > 12, stopped

        async def close_all() -> None:
            await asyncio.gather(*(c.close() for c in clients))

        loop.run_until_complete(close_all())
    finally:
        loop.close()
        server.stop()
