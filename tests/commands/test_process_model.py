"""Which process model ``monotape run`` resolves (config.HostConfig.writer_count,
commands/foreground.process_model): by default the placement faster on the machine (the
one-process node below 3 cores, else a writer process per core, at most 16), 0 with
--single-process, and the one-process node, said in one log line, when a setting only it
honours is on; an explicit --writers N with such a setting is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

import monotape.config as config_module
from monotape.cli import main
from monotape.commands.clientside import ClientError
from monotape.commands.foreground import banner, node_only_reason, process_model
from monotape.config import load_config


def printed(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[object, str]:
    """``run --print-config``: host.writers as printed, and the resolved-count line."""
    assert main(["run", "--print-config", *flags]) == 0
    out, err = capsys.readouterr()
    comment = [x for x in err.splitlines() if x.startswith("# host.writers")]
    return json.loads(out)["host"]["writers"], comment[0] if comment else ""


def test_the_default_is_the_placement_faster_here_and_single_process_is_zero(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MONOTAPE_HOST__WRITERS", raising=False)
    assert load_config().host.writers == "auto"  # the spelling in config
    cores = len(os.sched_getaffinity(0))
    writers = 0 if cores < 3 else min(16, cores)
    assert process_model(load_config()).host.writers == writers
    # --print-config keeps "auto" (a config saved from it fits any machine) and says, on
    # stderr, what run starts here and why
    why = "the one-process node, faster than the host below 3 cores" if cores < 3 else "per core"
    for flags in ((), ("--writers", "auto"), ("--writers", "AUTO")):
        value, comment = printed(capsys, *flags)
        assert value == "auto", flags
        assert f'"auto" resolves to {writers} here' in comment and why in comment
    assert printed(capsys, "--single-process") == (0, "")
    assert printed(capsys, "--writers", "0") == (0, "")
    assert printed(capsys, "--writers", "3") == (3, "")
    monkeypatch.setenv("MONOTAPE_HOST__WRITERS", "auto")
    assert printed(capsys)[0] == "auto"


def test_a_config_saved_from_print_config_is_auto_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    value, _ = printed(capsys)
    saved = tmp_path / "monotape.toml"
    saved.write_text(f'[host]\nwriters = "{value}"\n')
    assert load_config(str(saved)).host.writers == "auto"


def test_the_fallback_is_said_by_print_config_and_the_banner(
    capsys: pytest.CaptureFixture[str],
) -> None:
    value, comment = printed(capsys, "--restart-every", "30")
    assert value == "auto"
    assert '"auto" resolves to 0 here: --restart-every needs the one-process node' in comment
    cfg = load_config(overrides={"feeds.restart_every_s": 30.0})
    reason = node_only_reason(cfg)
    assert reason is not None and "--restart-every" in reason
    auto_here = node_only_reason(load_config())  # "auto" alone: the node only below 3 cores
    if len(os.sched_getaffinity(0)) < 3:
        assert auto_here is not None and "--writers N runs the host" in auto_here
    else:
        assert auto_here is None
    assert node_only_reason(load_config(overrides={**_RESTART, "host.writers": 0})) is None
    node = SimpleNamespace(replay=False, handlers=[1, 2], universe=[], ws_port=1, admin_port=2)
    said = banner(node, process_model(cfg), reason)  # type: ignore[arg-type]
    line = next(x for x in said.splitlines() if x.strip().startswith("processes"))
    assert "--restart-every needs the one-process node" in line
    assert "as asked" not in said
    plain = banner(node, load_config(overrides={"host.writers": 0}))  # type: ignore[arg-type]
    assert "one (as asked; --writers N runs the host" in plain


_RESTART = {"feeds.restart_every_s": 30.0}


@pytest.mark.parametrize("value", ["banana", " 2", "17", "-1", "2.5", ""])
def test_a_bad_writers_value_is_one_line_naming_the_choices(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("MONOTAPE_HOST__WRITERS", value)
    assert main(["run", "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert '"auto"' in err and "0-16" in err and "MONOTAPE_HOST__WRITERS" in err
    assert "Invalid enum value" not in err
    monkeypatch.delenv("MONOTAPE_HOST__WRITERS")
    if value == " 2":
        return  # the flag reads numbers as int() does: " 2" is 2 there
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--print-config", "--writers", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "0..16" in err and "auto" in err


@given(st.integers(min_value=0, max_value=512))
def test_auto_is_the_node_below_three_cores_else_a_writer_per_core_at_most_sixteen(
    cores: int,
) -> None:
    """On two cores the one-process node is the faster placement (measured:
    docs/benchmarks.md, "Which placement on 2 cores"); from three, the host."""
    saved = config_module.available_cores
    config_module.available_cores = lambda: cores
    try:
        n = load_config().host.writer_count
    finally:
        config_module.available_cores = saved
    assert n == (0 if cores < 3 else min(16, cores))


def test_settings_the_host_lacks_fall_back_to_the_node_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for overrides, flag in (
        ({"feeds.restart_every_s": 2.0}, "--restart-every"),
        ({"server.fault_injection": True}, "--enable-fault-injection"),
    ):
        cfg = process_model(load_config(overrides=overrides))
        assert cfg.host.writers == 0
        lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
        said = [x for x in lines if x["event"] == "one_process_node"]
        assert len(said) == 1 and said[0]["settings"] == [flag]
        with pytest.raises(ClientError, match=flag):  # asked for the host: refused, not ignored
            process_model(load_config(overrides={**overrides, "host.writers": 2}))
    # resolved once: a resolved config stays as it is, and says nothing more
    cfg = process_model(load_config(overrides={"host.writers": 3}))
    assert process_model(cfg).host.writers == 3
    assert "one_process_node" not in capsys.readouterr().err
