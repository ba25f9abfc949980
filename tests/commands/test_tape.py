"""``monotape tape``'s own choices: the --max-hz values the node takes, and --refresh minting a
token the node beside it verifies, from the same dev key, for the same subject."""

from __future__ import annotations

from pathlib import Path

import pytest

from monotape.cli import build_parser
from monotape.commands.clientside import ClientError
from monotape.commands.tape import SUB, dev_key_refresh
from monotape.config import load_config
from monotape.platform.auth import build_verifier, ensure_dev_keys


def test_max_hz_takes_the_node_s_rates_only() -> None:
    parser = build_parser()
    assert parser.parse_args(["tape", "XNAS:AAPL"]).max_hz == 25.0
    args = parser.parse_args(["tape", "XNAS:AAPL", "--max-hz", "2.5", "--refresh"])
    assert (args.max_hz, args.refresh) == (2.5, True)
    assert parser.parse_args(["tape", "XNAS:AAPL", "--max-hz", "5"]).max_hz == 5.0
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["tape", "XNAS:AAPL", "--max-hz", "10"])
    assert exit_.value.code == 2


async def test_refresh_mints_from_the_data_dir_s_dev_key(tmp_path: Path) -> None:
    cfg = load_config(overrides={"data_dir": str(tmp_path)})
    ensure_dev_keys(tmp_path)
    refresh = dev_key_refresh(cfg, minted=True)
    first, second = await refresh(), await refresh()
    verifier = build_verifier(cfg.auth, tmp_path)
    try:
        for token in (first, second):
            claims = verifier.verify_sync(token)
            assert claims.sub == SUB and not claims.admin
    finally:
        verifier.close()


def test_a_given_token_cannot_be_refreshed(tmp_path: Path) -> None:
    cfg = load_config(overrides={"data_dir": str(tmp_path)})
    with pytest.raises(ClientError, match="cannot refresh a token given with --token"):
        dev_key_refresh(cfg, minted=False)
