"""The alert rules: built in code, checked in, valid for promtool, and each one unit-tested with
promtool (firing on the fault it names, silent on a healthy node beside it), with a runbook."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from monotape import metric_names as m
from monotape.alerts import DEFAULT_RULES_PATH, AlertRule, alert_rules, render_rules
from monotape.alerts.yaml_writer import dump
from monotape.cli import main
from monotape.testing.prometheus import require_tool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / DEFAULT_RULES_PATH
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RULES_BY_NAME = {r.name: r for r in alert_rules()}
N1 = 'instance="n1",job="monotape"'  # the node at fault
N2 = 'instance="n2",job="monotape"'  # a healthy node beside it


def test_the_checked_in_rule_file_is_what_the_code_builds() -> None:
    assert RULES.read_text() == render_rules(), "run `monotape alerts build` and commit the file"


def test_alerts_build_writes_the_file_and_check_tells_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rules" / "monotape.yml"
    assert main(["alerts", "build", "--out", str(out)]) == 0
    assert out.read_text() == RULES.read_text()
    assert main(["alerts", "build", "--out", str(out), "--check"]) == 0
    out.write_text(out.read_text().replace("> 0", "> 1", 1))
    assert main(["alerts", "build", "--out", str(out), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    base = "https://git.example/desk/monotape/blob/main/docs/runbooks.md"
    assert main(["alerts", "build", "--out", str(out), "--runbook-base", base]) == 0
    assert f"{base}#invariantviolated" in out.read_text()


def test_every_alert_the_issue_names_is_there_with_its_severity() -> None:
    assert list(RULES_BY_NAME) == [
        "InvariantViolated",
        "GlassRegressions",
        "GlassRegressionOneTerminal",
        "TickToGlassP99High",
        "GCPauseLong",
        "FeedRedundancyLost",
        "FeedStale",
        "TerminalsStale",
        "VenueStale",
        "FeedBackwards",
        "RegressionsStoppedAtPeak",
        "AdmissionRejectingSustained",
        "SlowConsumerDropsHigh",
        "EventLoopLagHigh",
        "CpuStarved",
        "FrameRateBelowGrid",
    ]
    assert RULES_BY_NAME["InvariantViolated"].severity == "page"
    assert RULES_BY_NAME["GlassRegressions"].severity == "page"
    assert m.GLASS_REGRESSING_TERMINALS in RULES_BY_NAME["GlassRegressions"].expr
    assert RULES_BY_NAME["GlassRegressionOneTerminal"].severity == "warning"
    assert 'stage="tick_to_write"' in RULES_BY_NAME["TickToGlassP99High"].expr
    assert m.STAGE_DURATION in RULES_BY_NAME["TickToGlassP99High"].expr


def test_promtool_accepts_the_rules_and_the_deploy_configs() -> None:
    promtool = require_tool("promtool", "prometheus")
    for args in (
        ["check", "rules", str(RULES)],
        ["check", "config", str(ROOT / "deploy/prometheus/prometheus.yml")],
    ):
        done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    amtool = require_tool("amtool", "prometheus-alertmanager")
    done = subprocess.run(
        [amtool, "check-config", str(ROOT / "deploy/alertmanager/alertmanager.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## ", text, flags=re.M)
    return {p.split("\n", 1)[0].strip(): p for p in parts[1:]}


@pytest.mark.parametrize("name", list(RULES_BY_NAME))
def test_each_alert_has_a_runbook_section(name: str) -> None:
    rule = RULES_BY_NAME[name]
    assert rule.runbook_url() == f"docs/runbooks.md#{name.lower()}"
    section = _sections(RUNBOOKS.read_text()).get(name)
    assert section is not None, f"docs/runbooks.md has no '## {name}' section"
    for part in ("What it means", "Look first", "What to do"):
        assert f"**{part}.**" in section, f"{name}: the runbook section lacks '{part}'"
    assert rule.summary and rule.description and rule.severity in ("page", "warning")


# -- promtool unit tests: one per alert, firing and not firing -----------------------------------
# Each case: input series (1-minute samples) and, per evaluation time, the label sets expected to
# fire. An empty list is the "not firing" check; a healthy node (n2) rides along in most cases.

Case = dict[str, Any]
CASES: dict[str, Case] = {
    "InvariantViolated": {
        "series": [
            (f'{m.INVARIANT_VIOLATION}{{invariant="no_dangling_entries",{N1}}}', "0 0 1 1 1"),
            (f'{m.INVARIANT_VIOLATION}{{invariant="no_dangling_entries",{N2}}}', "0 0 0 0 0"),
        ],
        "checks": [
            ("1m", []),
            ("3m", [{"invariant": "no_dangling_entries", "instance": "n1", "job": "monotape"}]),
        ],
    },
    # Distinct terminals fleet-wide: one on n1 at 4m is not a page; a second one, on another
    # node, at 8m is; 10 minutes later both have left the window.
    "GlassRegressions": {
        "series": [
            (f"{m.GLASS_REGRESSING_TERMINALS}{{{N1}}}", "0x3 1x16"),
            (f"{m.GLASS_REGRESSING_TERMINALS}{{{N2}}}", "0x7 1x12"),
        ],
        "checks": [("3m", []), ("6m", []), ("9m", [{"job": "monotape"}]), ("20m", [])],
    },
    # One terminal is a warning, never a page (above); two are a page, not this warning.
    "GlassRegressionOneTerminal": {
        "series": [
            (f"{m.GLASS_REGRESSING_TERMINALS}{{{N1}}}", "0x3 1x16"),
            (f"{m.GLASS_REGRESSING_TERMINALS}{{{N2}}}", "0x7 1x12"),
        ],
        "checks": [("3m", []), ("6m", [{"job": "monotape"}]), ("9m", []), ("20m", [])],
    },
    "TickToGlassP99High": {
        # 100 ticks a second each; n1 has 5% above 80 ms, n2 none above 45 ms
        "series": [
            *[
                (f'{m.STAGE_DURATION}_bucket{{stage="tick_to_write",le="{le}",{N1}}}', v)
                for le, v in [
                    ("0.04", "0+5400x30"),
                    ("0.045", "0+5520x30"),
                    ("0.05", "0+5580x30"),
                    ("0.08", "0+5700x30"),
                    ("0.1", "0+5900x30"),
                    ("+Inf", "0+6000x30"),
                ]
            ],
            *[
                (f'{m.STAGE_DURATION}_bucket{{stage="tick_to_write",le="{le}",{N2}}}', v)
                for le, v in [
                    ("0.04", "0+5700x30"),
                    ("0.045", "0+6000x30"),
                    ("0.05", "0+6000x30"),
                    ("0.08", "0+6000x30"),
                    ("0.1", "0+6000x30"),
                    ("+Inf", "0+6000x30"),
                ]
            ],
            # another stage far above budget must not count
            (f'{m.STAGE_DURATION}_bucket{{stage="decode",le="0.08",{N2}}}', "0x30"),
            (f'{m.STAGE_DURATION}_bucket{{stage="decode",le="+Inf",{N2}}}', "0+6000x30"),
        ],
        "checks": [("4m", []), ("12m", [{"instance": "n1"}])],
    },
    "GCPauseLong": {
        # n1: one gen-2 pause over 50 ms a minute; n2: as many collections, all short
        "series": [
            (f'{m.GC_PAUSE}_count{{generation="2",{N1}}}', "0+1x30"),
            (f'{m.GC_PAUSE}_bucket{{generation="2",le="0.05",{N1}}}', "0x30"),
            (f'{m.GC_PAUSE}_count{{generation="2",{N2}}}', "0+1x30"),
            (f'{m.GC_PAUSE}_bucket{{generation="2",le="0.05",{N2}}}', "0+1x30"),
        ],
        "checks": [("1m", []), ("20m", [{"instance": "n1"}])],
    },
    "FeedRedundancyLost": {
        "series": [
            (f'{m.FEED_HANDLER_UP}{{venue="XNAS",handler="A",{N1}}}', "1x10"),
            (f'{m.FEED_HANDLER_UP}{{venue="XNAS",handler="B",{N1}}}', "1 1 0 0 0 0 0 0 0 0"),
            (f'{m.FEED_HANDLER_UP}{{venue="XNYS",handler="A",{N1}}}', "1x10"),
            (f'{m.FEED_HANDLER_UP}{{venue="XNYS",handler="B",{N1}}}', "1x10"),
        ],
        # down from 2m: pending for its first minute (a restart is down for ~0.5 s)
        "checks": [("2m", []), ("4m", [{"instance": "n1", "venue": "XNAS"}])],
    },
    "FeedStale": {
        "series": [
            (f'{m.TICKS_ADMITTED}{{venue="XNAS",{N1}}}', "0+6000x5 30000x10"),
            (f'{m.TICKS_ADMITTED}{{venue="XNYS",{N1}}}', "0+6000x15"),
        ],
        "checks": [("4m", []), ("10m", [{"instance": "n1", "venue": "XNAS"}])],
    },
    "TerminalsStale": {
        # n1's grid stalls from 2m (every terminal told STALE); n2 greys two terminals for one
        # sample (a sequencer restart of a few seconds), which never pages
        "series": [
            (f'{m.STALE_TERMINALS}{{process="writer-0",{N1}}}', "0 0 40x10"),
            (f'{m.STALE_TERMINALS}{{process="writer-1",{N1}}}', "0 0 35x10"),
            (f"{m.STALE_TERMINALS}{{{N2}}}", "0 2 0x10"),
        ],
        "checks": [("2m", []), ("4m", [{"instance": "n1"}])],
    },
    "VenueStale": {
        # both XNAS handlers down on n1 from 2m: both writers were told; n2 healthy
        "series": [
            (f'{m.STALE_VENUES}{{process="writer-0",{N1}}}', "0 0 1x10"),
            (f'{m.STALE_VENUES}{{process="writer-1",{N1}}}', "0 0 1x10"),
            (f"{m.STALE_VENUES}{{{N2}}}", "0x12"),
        ],
        "checks": [("2m", []), ("4m", [{"instance": "n1"}])],
    },
    "FeedBackwards": {
        "series": [
            (f'{m.FEED_BACKWARDS}{{venue="XNAS",handler="A",{N1}}}', "0x6"),
            (f'{m.FEED_BACKWARDS}{{venue="XNAS",handler="B",{N1}}}', "0 0 0 2 2 2"),
        ],
        "checks": [("2m", []), ("4m", [{"instance": "n1", "venue": "XNAS", "handler": "B"}])],
    },
    "RegressionsStoppedAtPeak": {
        # 2,000 ticks/s on XNAS and XNYS; XNAS's regressions stop at 10m (its twin is gone).
        # IEXG is quiet (10 ticks/s): no regressions there is no news.
        "series": [
            (f'{m.TICKS_ADMITTED}{{venue="XNAS",{N1}}}', "0+120000x40"),
            (f'{m.SEQUENCE_REGRESSIONS}{{venue="XNAS",{N1}}}', "0+600x10 6000x30"),
            (f'{m.TICKS_ADMITTED}{{venue="XNYS",{N1}}}', "0+120000x40"),
            (f'{m.SEQUENCE_REGRESSIONS}{{venue="XNYS",{N1}}}', "0+600x40"),
            (f'{m.TICKS_ADMITTED}{{venue="IEXG",{N1}}}', "0+600x40"),
            (f'{m.SEQUENCE_REGRESSIONS}{{venue="IEXG",{N1}}}', "0x40"),
        ],
        "checks": [("15m", []), ("30m", [{"instance": "n1", "venue": "XNAS"}])],
    },
    "AdmissionRejectingSustained": {
        # n1 keeps refusing for lack of tokens; n2 only refuses while it drains (by design)
        "series": [
            (f'{m.ADMISSION_REJECTED}{{reason="rate",{N1}}}', "0+60x20"),
            (f'{m.ADMISSION_REJECTED}{{reason="draining",{N1}}}', "0x20"),
            (f'{m.ADMISSION_REJECTED}{{reason="rate",{N2}}}', "0x20"),
            (f'{m.ADMISSION_REJECTED}{{reason="draining",{N2}}}', "0+600x20"),
        ],
        "checks": [("3m", []), ("10m", [{"instance": "n1"}])],
    },
    "SlowConsumerDropsHigh": {
        "series": [
            (f"{m.FRAMES_SENT}{{{N1}}}", "0+60000x30"),
            (f"{m.SLOW_CONSUMER_DROPS}{{{N1}}}", "0+6000x30"),  # 10%
            (f"{m.FRAMES_SENT}{{{N2}}}", "0+60000x30"),
            (f"{m.SLOW_CONSUMER_DROPS}{{{N2}}}", "0+60x30"),  # 0.1%
        ],
        "checks": [("5m", []), ("20m", [{"instance": "n1"}])],
    },
    "EventLoopLagHigh": {
        "series": [
            (f"{m.EVENT_LOOP_LAG}{{{N1}}}", "0.05x20"),
            (f"{m.EVENT_LOOP_LAG}{{{N2}}}", "0.005x20"),
        ],
        "checks": [("3m", []), ("10m", [{"instance": "n1", "job": "monotape"}])],
    },
    "CpuStarved": {
        # n1's writer-0 waits 0.3 s a second from the start, its sequencer 0.1; n2's writer
        # waited 0.3 only for 5 minutes (a storm), then 0.05
        "series": [
            (f'{m.CPU_WAIT}{{instance="n1",job="monotape",process="writer-0"}}', "0+18x30"),
            (f'{m.CPU_WAIT}{{instance="n1",job="monotape",process="sequencer"}}', "0+6x30"),
            (f'{m.CPU_WAIT}{{instance="n2",job="monotape",process="writer-0"}}', "0+18x5 90+3x25"),
        ],
        "checks": [
            ("8m", []),
            ("20m", [{"instance": "n1", "process": "writer-0"}]),
        ],
    },
    "FrameRateBelowGrid": {
        # n1 takes 20 boundaries a second and skips 5 (20%) from 2m; n2 takes all 25, skips
        # none; n3 skips one a second (4%: a storm's late frames, not this)
        "series": [
            (f"{m.FRAME_BOUNDARIES}{{{N1}}}", "0+1500x2 3000+1200x30"),
            (f"{m.FRAME_BOUNDARIES_SKIPPED}{{{N1}}}", "0x2 0+300x30"),
            (f"{m.FRAME_BOUNDARIES}{{{N2}}}", "0+1500x32"),
            (f"{m.FRAME_BOUNDARIES_SKIPPED}{{{N2}}}", "0x32"),
            (f'{m.FRAME_BOUNDARIES}{{instance="n3",job="monotape"}}', "0+1440x32"),
            (f'{m.FRAME_BOUNDARIES_SKIPPED}{{instance="n3",job="monotape"}}', "0+60x32"),
        ],
        # above the share from ~3m (the 5m rate), pending for 10 minutes
        "checks": [("8m", []), ("20m", [{"instance": "n1"}])],
    },
}


def test_every_alert_has_a_unit_test_that_fires_and_one_that_does_not() -> None:
    assert set(CASES) == set(RULES_BY_NAME)
    for name, case in CASES.items():
        fired = [labels for _, labels in case["checks"]]
        assert [] in fired and any(fired), name


def _expand(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda g: labels.get(g.group(1), ""), template)


def _expected(rule: AlertRule, labels: dict[str, str]) -> dict[str, Any]:
    full = {**labels, "severity": rule.severity.value}
    return {
        "exp_labels": full,
        "exp_annotations": {
            "summary": _expand(rule.summary, full),
            "description": _expand(rule.description, full),
            "runbook_url": rule.runbook_url(),
        },
    }


@pytest.mark.parametrize("name", list(CASES))
def test_promtool_unit_test(name: str, tmp_path: Path) -> None:
    promtool = require_tool("promtool", "prometheus")
    rule, case = RULES_BY_NAME[name], CASES[name]
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in case["series"]],
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": name,
                        "exp_alerts": [_expected(rule, labels) for labels in firing],
                    }
                    for at, firing in case["checks"]
                ],
            }
        ],
    }
    path = tmp_path / f"{name}.test.yml"
    path.write_text(dump(test))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
