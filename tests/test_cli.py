"""The command line in-process: every everyday mistake is one line and exit 2, no traceback.

What needs a running node (ports in use, refused upgrades, Ctrl-C, the endpoints file) is in
tests/e2e/test_cli.py; these are the mistakes caught before anything starts.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape import log
from monotape.cli import build_parser, main
from monotape.commands.clientside import (
    ClientError,
    Credential,
    client_token,
    explain_refusal,
    redact,
    terminal_url,
)
from monotape.commands.flags import port, positive_float, positive_int, seconds
from monotape.config import load_config
from monotape.platform.role.endpoints import endpoints_for, read_endpoints, write_endpoints
from tests.conftest import CLIENT_COMMANDS


@pytest.fixture(autouse=True)
def fresh_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A new user's shell: an empty directory, no monotape variables."""
    for name in list(os.environ):
        if name.startswith("MONOTAPE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    levels = {n: logging.getLogger(n).level for n in ("", "monotape")}
    yield tmp_path
    log.set_stream(sys.stderr)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("run", "--ws-port", "-1"), "--ws-port: -1 is not a port"),
        (("run", "--ws-port", "99999"), "--ws-port: 99999 is not a port"),
        (("run", "--admin-port", "70000"), "--admin-port: 70000 is not a port"),
        (("run", "--rate", "-5"), "--rate: -5 must be a positive number"),
        (("load", "storm", "--terminals", "-5"), "--terminals: -5 must be at least 1"),
        (("tape", "--count", "0", "XNAS:AAPL"), "--count: 0 must be at least 1"),
        (("run", "--replay", "no-such.ndjson"), "--replay no-such.ndjson: no such file"),
        (("tape", "--url", "http://127.0.0.1:8765/", "XNAS:AAPL"), "not a WebSocket URL"),
    ],
)
def test_everyday_mistakes_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    code, _, err = cli(capsys, *argv)
    assert code == 2
    assert says in one_line(err)


def test_an_invalid_log_level_is_one_line_for_every_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONOTAPE_LOG_LEVEL", "loud")
    for argv in (("run", "--print-config"), ("symbols",), ("tape", "XNAS:AAPL")):
        code, _, err = cli(capsys, *argv)
        assert code == 2, argv
        line = one_line(err)
        assert "log_level" in line and "MONOTAPE_LOG_LEVEL" in line and "debug" in line


def test_monotape_token_is_not_configuration(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONOTAPE_TOKEN", "eyJhbGciOiJFUzI1NiJ9.e30.c2ln")
    monkeypatch.setenv("MONOTAPE_ADMIN_TOKEN", "eyJhbGciOiJFUzI1NiJ9.e30.c2ln")
    code, out, err = cli(capsys, "run", "--print-config")
    assert code == 0 and "unknown field" not in err
    assert "eyJ" not in out + err
    code, out, err = cli(capsys, "symbols", "XNAS:AAP*")
    assert code == 0 and "XNAS:AAPL" in out and "eyJ" not in out + err


def test_an_unwritable_data_dir_is_one_line(
    capsys: pytest.CaptureFixture[str], fresh_dir: Path
) -> None:
    (fresh_dir / "a-file").write_text("")
    code, _, err = cli(capsys, "run", "--data-dir", str(fresh_dir / "a-file" / "state"))
    assert code == 2
    line = one_line(err)
    assert "cannot write the data dir" in line and "--data-dir" in line


@pytest.mark.parametrize("model", ["--single-process", "--writers=1"], ids=["node", "host"])
def test_a_data_dir_in_use_is_one_line_naming_it_and_its_pid(
    capsys: pytest.CaptureFixture[str], fresh_dir: Path, model: str
) -> None:
    # Held here as a running `monotape run` holds it; the refusal comes before anything starts.
    from monotape.platform.role.datadir_lock import lock_data_dir

    state = fresh_dir / "state"
    held = lock_data_dir(state)
    try:
        code, out, err = cli(
            capsys, "run", model, "--data-dir", str(state), "--ws-port", "0",
            "--admin-port", "0", "--duration", "1",
        )  # fmt: skip
    finally:
        held.release()
    assert code == 2
    line = [x for x in err.strip().splitlines() if not x.startswith("{")]
    assert len(line) == 1 and "Traceback" not in err, err
    assert f"data dir {state.resolve()} is in use by monotape pid {os.getpid()}" in line[0]
    assert "monotape is running" not in out
    # A refused host leaves no run dir (it is named after this process: the host ran in it).
    assert not (Path(tempfile.gettempdir()) / f"monotape-run-{os.getpid()}").exists()


def test_a_client_never_makes_a_signing_key_of_its_own(
    capsys: pytest.CaptureFixture[str], fresh_dir: Path
) -> None:
    # Before: tape from another directory minted a token from a brand-new key that no node
    # knows, then failed with a bare 401. Now it says which data dir it looked in and what to do.
    for argv in (
        ("tape", "XNAS:AAPL"),
        ("load", "churn", "--duration-s", "1"),
        ("load", "storm", "--terminals", "5"),
    ):
        code, _, err = cli(capsys, *argv)
        assert code == 2, argv
        line = one_line(err)
        assert str(fresh_dir / ".monotape") in line and "--data-dir" in line, line
        assert "--token" in line and "MONOTAPE_TOKEN" in line
    assert not (fresh_dir / ".monotape" / "keys").exists()


def test_symbols_without_a_node_lists_the_built_in_universe(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "symbols", "aapl")
    assert code == 0
    keys = [line.split()[0] for line in out.splitlines()[1:]]
    assert "XNAS:AAPL" in keys and all("AAPL" in k for k in keys)
    assert "built-in universe" in err
    code, out, err = cli(capsys, "symbols", "NOPE:*")
    assert code == 1 and "no symbol matches" in err


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ("run",),
        ("tape",),
        ("symbols",),
        ("token",),
        ("hdr", "report"),
        ("load", "churn"),
        ("load", "storm"),
        ("load", "replay"),
    ):
        code, out, _ = cli(capsys, *argv, "--help")
        assert code == 0 and "usage:" in out, argv
    _, storm_help, _ = cli(capsys, "load", "storm", "--help")
    assert "--release SECOND" in " ".join(storm_help.split())  # the release storm needs it
    _, replay_help, _ = cli(capsys, "load", "replay", "--help")
    assert "running node's admin URL" in " ".join(replay_help.split())


def test_the_parser_lists_the_client_commands() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sub.choices is not None
    assert {"run", "tape", "symbols", "token", "hdr", "load"} <= set(sub.choices)


# -- the client side, pure ---------------------------------------------------------------------
def test_token_precedence_flag_then_env_then_minted(fresh_dir: Path) -> None:
    cfg = load_config(overrides={"data_dir": str(fresh_dir / "d")})
    given = Credential("flag", minted=False)
    assert client_token("flag", cfg, {"MONOTAPE_TOKEN": "env"}, sub="t") == given
    assert client_token(None, cfg, {"MONOTAPE_TOKEN": "env"}, sub="t") == ("env", False)
    adm = client_token(None, cfg, {"MONOTAPE_ADMIN_TOKEN": "adm"}, sub="t", admin=True)
    assert adm == ("adm", False)
    with pytest.raises(ClientError, match="no dev key"):
        client_token(None, cfg, {}, sub="t")
    from monotape.platform.auth import ensure_dev_keys

    ensure_dev_keys(cfg.data_dir)
    token, minted = client_token(None, cfg, {}, sub="t")
    assert minted and token is not None and token.startswith("eyJ")
    off = load_config(overrides={"data_dir": str(fresh_dir / "d"), "auth.enabled": False})
    assert client_token(None, off, {}, sub="t") == (None, False)


def test_clients_follow_the_endpoints_of_the_node_on_their_data_dir(fresh_dir: Path) -> None:
    data = fresh_dir / "d"
    data.mkdir()
    cfg = load_config(overrides={"data_dir": str(data)})
    assert terminal_url(None, cfg) == "ws://127.0.0.1:8765/"  # nothing runs there
    write_endpoints(data, endpoints_for("0.0.0.0", 40001, 40002, data, 0))
    found = read_endpoints(data)
    assert found is not None and found.ws == "ws://127.0.0.1:40001/"  # a wildcard: loopback
    assert terminal_url(None, cfg) == "ws://127.0.0.1:40001/"
    assert terminal_url("ws://127.0.0.1:9/", cfg) == "ws://127.0.0.1:9/"  # --url wins
    # A file left by a node that died is ignored.
    dead = endpoints_for("127.0.0.1", 1, 2, data, 0)
    write_endpoints(data, msgspec.structs.replace(dead, pid=2**22 + 7))
    assert read_endpoints(data) is None
    assert terminal_url(None, cfg) == "ws://127.0.0.1:8765/"


@pytest.mark.parametrize(
    ("status", "body", "minted", "says"),
    [
        (401, "unauthorized: bad signature\n", True, "bad signature"),
        (403, "forbidden\n", False, "HTTP 403"),
        (503, "draining: reconnect elsewhere\n", False, "retry in 3 s"),
    ],
)
def test_refusals_show_the_reason_and_what_to_do(
    status: int, body: str, minted: bool, says: str, fresh_dir: Path
) -> None:
    cfg = load_config(overrides={"data_dir": str(fresh_dir / "d")})
    line = explain_refusal(status, body, "3", cfg, minted)
    assert says in line and "\n" not in line
    if status == 401:
        assert str(fresh_dir / "d") in line and "--data-dir" in line
    if status == 503:
        assert "/admin/resume" in line


def test_redact_strips_a_token_from_a_url() -> None:
    assert redact("ws://127.0.0.1:1/?token=eyJabc") == "ws://127.0.0.1:1/"


@CLIENT_COMMANDS
def test_no_node_listening_is_one_line_naming_the_url(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    # load storm / replay used to end in a ConnectionRefusedError traceback here.
    with socket.socket() as s:  # bound and never listening: every connect is refused
        s.bind(("127.0.0.1", 0))
        url = f"ws://127.0.0.1:{s.getsockname()[1]}/"
        code, out, err = cli(capsys, *command, "--url", url, "--token", "eyJsecret")
    assert code == 2, err
    line = one_line(err)
    prog = " ".join(command[:2]) if command[0] == "load" else "tape"
    assert line.startswith(f"monotape {prog}: ")
    assert f"cannot connect to {url}: Connection refused" in line
    assert "is monotape run running there?" in line and "--data-dir" in line
    assert "eyJsecret" not in out + err


def test_a_reader_that_leaves_early_is_not_a_traceback(fresh_dir: Path) -> None:
    # `monotape symbols | head -1`: the built-in universe is ~170 KB, more than a pipe holds, so
    # the command is still writing when the reader closes its end.
    proc = subprocess.Popen(
        [sys.executable, "-m", "monotape", "symbols", "--data-dir", str(fresh_dir / "d")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"key")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err, err


@given(st.integers(-100_000, 100_000))
def test_number_flags_take_exactly_their_range(n: int) -> None:
    for convert, ok in ((port, 0 <= n <= 65_535), (positive_int, n >= 1)):
        if ok:
            assert convert(str(n)) == n
        else:
            with pytest.raises(argparse.ArgumentTypeError, match=str(n)):
                convert(str(n))


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-0.5", "x", ""])
def test_seconds_and_rates_refuse_what_is_not_a_finite_amount(text: str) -> None:
    for convert in (seconds, positive_float):
        with pytest.raises(argparse.ArgumentTypeError):
            convert(text)
    assert seconds("0") == 0.0 and positive_float("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match="must be a positive number"):
        positive_float("0")
