"""The configuration loader: client variables kept apart, one line naming the field on error."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape import config as config_module
from monotape.config import CLIENT_ENV, AuthConfig, ConfigError, load_config


@pytest.mark.parametrize("name", sorted(CLIENT_ENV))
def test_client_variables_are_not_configuration(name: str) -> None:
    # MONOTAPE_TOKEN is a credential for the client commands, not a field of the node's config:
    # before, every subcommand died with "unknown field 'token'".
    cfg = load_config(None, {name: "eyJhbGciOiJFUzI1NiJ9.e30.sig", "MONOTAPE_DATA_DIR": "/x"})
    assert cfg.data_dir == "/x"


def test_an_unknown_variable_names_itself() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"MONOTAPE_SERVER__WS_PROT": "9000"})
    assert err.value.path == "server.ws_prot"
    assert "MONOTAPE_SERVER__WS_PROT" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("level", ["debug", "INFO", "Warning", " error "])
def test_log_level_any_case(level: str) -> None:
    assert load_config(None, {"MONOTAPE_LOG_LEVEL": level}).log_level == level.strip().lower()


def test_an_invalid_log_level_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"MONOTAPE_LOG_LEVEL": "loud"})
    text = str(err.value)
    assert err.value.path == "log_level"
    assert "MONOTAPE_LOG_LEVEL" in text and "debug, info, warning, error" in text


@given(st.integers().filter(lambda p: not 0 <= p <= 65_535))
def test_a_port_outside_0_to_65535_is_refused(port: int) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"MONOTAPE_SERVER__WS_PORT": str(port)})
    assert err.value.path == "server.ws_port"
    with pytest.raises(ConfigError) as err:
        load_config(overrides={"server.admin_port": port})
    assert err.value.path == "server.admin_port"


@given(st.integers(min_value=0, max_value=65_535))
def test_every_port_0_to_65535_is_taken(port: int) -> None:
    assert load_config(overrides={"server.ws_port": port}).server.ws_port == port


@pytest.mark.parametrize("rate", ["-5", "0", "nan"])
def test_a_rate_that_is_not_positive_is_refused(rate: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"MONOTAPE_SIMULATOR__RATE": rate})
    assert err.value.path == "simulator.rate"


def test_auth_settings_load_like_every_other_section(tmp_path: Path) -> None:
    toml = tmp_path / "monotape.toml"
    toml.write_text('[auth]\naudience = "desk-a"\nleeway_s = 2.5\n')
    cfg = load_config(str(toml), {"MONOTAPE_AUTH__ISSUER": "sso"})
    assert cfg.auth == AuthConfig(audience="desk-a", issuer="sso", leeway_s=2.5)
    with pytest.raises(ConfigError) as err:
        load_config(None, {"MONOTAPE_AUTH__AUDIENCES": "x"})
    assert err.value.path == "auth.audiences"


def test_config_imports_nothing_of_the_product() -> None:
    """config sits below every room: auth imports it (AuthConfig, ConfigError), never the
    reverse, and no deferred import inside a function hides a circle."""
    tree = ast.parse(Path(config_module.__file__).read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("monotape.platform")]


@pytest.mark.parametrize(
    ("document", "line", "path"),
    [
        ('[server]\nws_port = "abc"\n', 2, "server.ws_port"),
        ("# ports\n\n[server]\nhost = '0.0.0.0'\nws_port = 70000\n", 5, "server.ws_port"),
        ('[host]\nwriters = "two"\n', 2, "host.writers"),
        ('data_dir = "d"\nlog_level = "loud"\n', 2, "log_level"),
        ('server.ws_port = "abc"\n', 1, "server.ws_port"),
        (
            '[feeds]\nreplay = """\n[server]\nws_port = 1\n"""\n[server]\nws_port = "q"\n',
            7,
            "server.ws_port",
        ),
        ("[server]\nws_prot = 1\n", 2, "server.ws_prot"),
        ("[server]\nkeepalive_interval_s = 0.5\n", 2, "server.keepalive_interval_s"),
    ],
    ids=["table", "range", "union", "top-level", "dotted-key", "multi-line", "unknown", "check"],
)
def test_a_bad_value_in_the_file_names_the_file_and_its_line(
    tmp_path: Path, document: str, line: int, path: str
) -> None:
    toml = tmp_path / "monotape.toml"
    toml.write_text(document)
    with pytest.raises(ConfigError) as err:
        load_config(str(toml), {})
    text = str(err.value)
    assert text.startswith(f"{toml}:{line}: {path}: "), text
    assert "\n" not in text and "$." not in text


def test_the_file_is_named_without_a_line_for_a_field_it_does_not_hold(tmp_path: Path) -> None:
    # max_queued_bytes keeps its default; the file's write_high_water is what breaks the check
    toml = tmp_path / "monotape.toml"
    toml.write_text("[server]\nwrite_high_water = 4194304\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(toml), {})
    assert str(err.value).startswith(f"{toml}: server.max_queued_bytes: ")


def test_a_value_from_the_environment_or_a_flag_never_blames_the_file(tmp_path: Path) -> None:
    toml = tmp_path / "monotape.toml"
    toml.write_text('[server]\nws_port = "abc"\nadmin_port = 8081\n')
    # the variable replaces the file's bad value, which is then never validated
    assert load_config(str(toml), {"MONOTAPE_SERVER__WS_PORT": "9000"}).server.ws_port == 9000
    env = {"MONOTAPE_SERVER__ADMIN_PORT": "70000"}
    with pytest.raises(ConfigError) as err:
        load_config(str(toml), env, {"server.ws_port": 9000})
    assert str(err.value) == (
        "invalid configuration: server.admin_port: Expected `int` <= 65535 "
        "(environment variable MONOTAPE_SERVER__ADMIN_PORT)"
    )
    # a flag's value is the one refused: neither the file nor the variable it overrides
    with pytest.raises(ConfigError) as err:
        load_config(str(toml), env, {"server.admin_port": 70000, "server.ws_port": 1})
    assert str(err.value) == "invalid configuration: server.admin_port: Expected `int` <= 65535"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"[server]\nws_port = \n", "Invalid value (at line 2, column 11)"),
        (b"\xff\xfe", "can't decode"),
        (None, "No such file"),
    ],
    ids=["syntax", "not-utf-8", "missing"],
)
def test_a_file_that_cannot_be_read_is_named(
    tmp_path: Path, content: bytes | None, says: str
) -> None:
    toml = tmp_path / "monotape.toml"
    if content is not None:
        toml.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        load_config(str(toml), {})
    assert str(err.value).startswith(f"config file {toml}: ") and says in str(err.value)


def test_a_config_printed_by_print_config_loads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`monotape run --print-config > monotape.json` then `--config monotape.json`: the same
    configuration (JSON, what it prints, is read by its suffix)."""
    from monotape.cli import main

    flags = ["--ws-port", "9100", "--writers", "2", "--rate", "5000"]
    assert main(["run", "--print-config", *flags]) == 0
    saved = tmp_path / "monotape.json"
    saved.write_text(capsys.readouterr().out)
    want = load_config(
        overrides={"server.ws_port": 9100, "host.writers": 2, "simulator.rate": 5000.0}
    )
    assert load_config(str(saved)) == want
    saved.write_text(saved.read_text().replace('"ws_port": 9100', '"ws_port": "abc"'))
    with pytest.raises(ConfigError, match=rf"^{saved}: server.ws_port: Expected `int`"):
        load_config(str(saved))
    saved.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=rf"^config file {saved}: Expected `object`"):
        load_config(str(saved))
