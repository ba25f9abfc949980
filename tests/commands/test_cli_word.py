"""The banner's commands work as printed (commands/foreground.cli_word): a bare ``monotape``
only when the shell would find this installation's own script; else that script by its
absolute path, since ``make run`` runs the venv's and a new user's shell has no venv active."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from monotape.commands.foreground import banner, cli_word
from monotape.config import load_config

SCRIPT = Path(sys.executable).parent / "monotape"


@pytest.fixture(autouse=True)
def _installed() -> None:
    if not SCRIPT.exists():
        pytest.skip(f"no console script beside {sys.executable} (not an installed venv)")


def test_the_bare_name_when_the_shell_finds_this_script() -> None:
    assert cli_word(lambda name: str(SCRIPT)) == "monotape"


def test_the_script_s_path_when_the_shell_does_not_find_one() -> None:
    word = cli_word(lambda name: None)
    assert shlex.split(word) == [str(SCRIPT.absolute())]
    assert Path(word).is_absolute()  # works from any directory


def test_the_script_s_path_when_the_shell_finds_another_installation(tmp_path: Path) -> None:
    other = tmp_path / "monotape"
    other.write_text("#!/bin/sh\n")
    assert shlex.split(cli_word(lambda name: str(other))) == [str(SCRIPT.absolute())]


def test_the_banner_names_the_default_data_dir_too() -> None:
    """From another directory the default ./.monotape is that directory's: every client command
    the banner prints carries the node's data dir by its absolute path."""
    node = SimpleNamespace(replay=False, handlers=[1, 2], universe=[], ws_port=1, admin_port=2)
    cfg = load_config()
    assert cfg.data_dir == ".monotape"  # the default
    said = banner(node, cfg)  # type: ignore[arg-type]
    where = shlex.quote(str(Path(".monotape").resolve()))
    commands = [x for x in said.splitlines() if f"{cli_word()} " in x]
    assert len(commands) == 3, said  # tape, token, symbols
    for line in commands:
        assert f" --data-dir {where}" in line, line
