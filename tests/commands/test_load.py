"""``monotape load``'s commands in-process: a knob flag msgspec refuses is named as its flag."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from monotape.cli import main


@pytest.fixture(autouse=True)
def fresh_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No node, no data dir, no monotape variables: a bad flag must be said before any of them
    is needed (the dev key for a token, the node's endpoints)."""
    for name in list(os.environ):
        if name.startswith("MONOTAPE_") or name in ("HOURS", "RATE"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("churn", "--duration-s", "-1"), "argument --duration-s: Expected `float` > 0.0, got -1"),
        # with a token: msgspec's words alone, once nothing else is missing
        (("churn", "--token", "t", "--duration-s", "0"), "argument --duration-s: "),
        (("churn", "--writers", "0", "--max-total", "0"), "argument --max-total: "),
        (("storm", "--backoff-cap-s", "0"), "argument --backoff-cap-s: "),
        (("replay", "trace.json", "--processes", "99"), "argument --processes: "),
    ],
    ids=["churn", "churn-token", "churn-own-node", "storm", "replay"],
)
def test_a_refused_knob_names_its_flag(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    code = main(["load", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"monotape load {argv[0]}: {says}"), err
    assert err.count("\n") == 1 and "$." not in err and "Traceback" not in err


def test_a_refused_soak_flag_names_its_flag() -> None:
    with pytest.raises(SystemExit, match=r"^soak: argument --report-every: .* got 0\.0$"):
        main(["load", "soak", "--report-every", "0"])


def test_a_refused_soak_value_names_the_flag_or_the_variable_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOURS", "-2")
    with pytest.raises(SystemExit, match=r"^soak: environment variable HOURS: .* got -2\.0$"):
        main(["load", "soak"])
    with pytest.raises(SystemExit, match=r"^soak: argument --hours: .* got -3\.0$"):
        main(["load", "soak", "--hours", "-3"])  # the flag wins over the variable
    monkeypatch.delenv("HOURS")
    with pytest.raises(SystemExit, match=r"^soak: argument --rate: .* got 0\.0$"):
        main(["load", "soak", "--rate", "0"])
