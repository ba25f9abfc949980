"""commands/flags.Parser: a subcommand refuses a flag it does not know in one line that points
at its own help; and `tape --priority` takes one key, so keys typed after it stay keys."""

from __future__ import annotations

import pytest

from monotape.cli import build_parser, main


@pytest.mark.parametrize(
    ("argv", "prog", "bad"),
    [
        (("run", "--bogus-flag"), "monotape run", "--bogus-flag"),
        (("tape", "--bogus", "XNAS:AAPL"), "monotape tape", "--bogus"),
        (("load", "churn", "--nope"), "monotape load churn", "--nope"),
        (("hdr", "report", "--stage", "write", "--zzz"), "monotape hdr report", "--zzz"),
    ],
)
def test_an_unknown_flag_points_at_its_subcommand_s_help(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], prog: str, bad: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{prog}: error: unrecognized arguments: {bad} (see {prog} --help)", err


def test_priority_before_the_keys_takes_one_key() -> None:
    args = build_parser().parse_args(
        ["tape", "--priority", "XNAS:AAPL", "XNAS:AAPL", "ARCX:MSFT", "--priority", "ARCX:MSFT"]
    )
    assert args.keys == ["XNAS:AAPL", "ARCX:MSFT"]
    assert args.priority == ["XNAS:AAPL", "ARCX:MSFT"]
    assert build_parser().parse_args(["tape", "XNAS:AAPL"]).priority is None
