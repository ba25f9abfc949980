"""YAML for the files this project generates (rules, configs, promtool tests), via PyYAML.

Deterministic (insertion order, fixed width) so a checked-in file can be regenerated and diffed;
multi-line text (descriptions, PromQL) is written as a literal block so it reads as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

__all__ = ["dump"]


class _Dumper(yaml.SafeDumper):
    """SafeDumper with literal blocks for multi-line strings."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(tree: Mapping[str, Any], *, header: str = "") -> str:
    """The YAML document for ``tree``; ``header`` lines become ``#`` comments on top."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.dump(
        dict(tree), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1_000_000
    )
    return comments + body
