"""``monotape hdr report``: the window flags, errors naming the flag, table and JSON output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from monotape.histograms.log import IntervalLogWriter
from monotape.histograms.recorder import Recorders
from monotape.histograms.report import add_report_arguments, resolve_window, run_report

T0 = 1_764_460_800_000  # 2025-11-30T00:00:00Z


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="monotape hdr report")
    add_report_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    recs = Recorders(start_ms=T0, stages=("write",))
    writer = IntervalLogWriter(tmp_path / "hdr", "writer-1", "h1")
    for k in range(6):  # intervals start at T0, T0+10 s, ..., T0+50 s
        for v in range(1, 101):
            recs["write"].record_ns(v * 1_000 * (k + 1))
        writer.write(recs.rotate_all(T0 + 10_000 * (k + 1)))
    writer.close()
    return tmp_path


def test_last_window_table(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # now = T0+60 s; --last 40s covers intervals starting at 20, 30, 40, 50 s
    assert (
        run_report(parse("--stage", "write", "--last", "40s"), str(data_dir), now_ms=T0 + 60_000)
        == 0
    )
    out = capsys.readouterr().out
    assert "stage write" in out and "intervals 4" in out and "count 400" in out
    assert "p99.9" in out and "max" in out


def test_from_to_json(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(
        "--stage",
        "write",
        "--from",
        "2025-11-30T00:00:00Z",
        "--to",
        str((T0 + 10_000) / 1000),
        "--json",
    )
    assert run_report(args, str(data_dir), now_ms=T0 + 60_000) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["count"] == 100 and body["intervals"] == 1
    assert body["min_us"] == 1 and body["max_us"] == 100


def test_dir_flag_overrides_data_dir(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--stage", "write", "--last", "1h", "--dir", str(data_dir / "hdr"), "--json")
    assert run_report(args, "/nonexistent", now_ms=T0 + 60_000) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 600


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("--stage", "nope"), "--stage"),
        (("--stage", "write", "--last", "forty"), "--last"),
        (("--stage", "write", "--last", "0s"), "--last"),
        (("--stage", "write", "--last", "5s", "--from", "0"), "--last"),
        (("--stage", "write", "--from", "yesterday"), "--from"),
        (("--stage", "write", "--from", "100", "--to", "not-a-time"), "--to"),
        (("--stage", "write", "--from", "100", "--to", "50"), "--to"),
        (("--stage", "write", "--to", "100"), "--to"),
        (("--stage", "write", "--dir", "/nonexistent/hdr"), "--dir"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    data_dir: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], flag: str
) -> None:
    assert run_report(parse(*argv), str(data_dir), now_ms=T0 + 60_000) == 2
    err = capsys.readouterr().err
    assert f"error: {flag}:" in err


def test_a_missing_directory_blames_what_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run away from the node, the default data dir is not its: the message says where it
    looked and how to name the node's, and blames --dir only when --dir was given."""
    assert run_report(parse("--stage", "write"), str(tmp_path / ".monotape")) == 2
    err = capsys.readouterr().err.strip()
    assert "--dir:" not in err and str(tmp_path / ".monotape" / "hdr") in err, err
    assert "--data-dir DIR or MONOTAPE_DATA_DIR" in err and len(err.splitlines()) == 1
    assert run_report(parse("--stage", "write", "--dir", str(tmp_path / "x")), "/nonexistent") == 2
    assert capsys.readouterr().err.startswith("monotape hdr report: error: --dir: no such dir")


def test_stage_is_required() -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--last", "40s")
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("argv", "window"),
    [
        ((), (T0 - 60_000, T0)),
        (("--last", "500ms"), (T0 - 500, T0)),
        (("--last", "2h"), (T0 - 7_200_000, T0)),
        (("--last", "1.5m"), (T0 - 90_000, T0)),
        (("--from", "2025-11-29T23:00:00"), (T0 - 3_600_000, T0)),  # naive = UTC, --to = now
        (("--from", "2025-11-30T01:00:00+01:00", "--to", "1764460801.5"), (T0, T0 + 1_500)),
    ],
)
def test_windows(argv: tuple[str, ...], window: tuple[int, int]) -> None:
    assert resolve_window(parse("--stage", "write", *argv), T0) == window
