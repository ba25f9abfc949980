"""The JavaScript SDK's own tests (``tests/js/*.test.mjs``, Node's built-in runner), run inside
``make test``: the decoder against every wire vector, the guard, reconnect and the client."""

from __future__ import annotations

import subprocess
from pathlib import Path

from monotape.testing.tools import require_tool

HERE = Path(__file__).resolve().parent


def test_the_javascript_sdk_passes_its_node_tests() -> None:
    node = require_tool("node", "nodejs")
    tests = sorted(str(p) for p in HERE.glob("*.test.mjs"))
    assert tests, "no JavaScript tests found"
    proc = subprocess.run(
        [node, "--test", *tests], capture_output=True, text=True, timeout=300, cwd=HERE.parents[1]
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "# fail 0" in proc.stdout, proc.stdout[-3000:]
