"""Prometheus alert rules built in code from ``metric_names``; ``monotape alerts build`` writes
deploy/prometheus/rules/monotape.yml. Each rule has a section in docs/runbooks.md."""

from .build import DEFAULT_RULES_PATH, add_build_arguments, render_rules, rules_tree, run_build
from .rules import AlertRule, Severity, alert_rules

__all__ = [
    "DEFAULT_RULES_PATH",
    "AlertRule",
    "Severity",
    "add_build_arguments",
    "alert_rules",
    "render_rules",
    "rules_tree",
    "run_build",
]
