"""A fault injected into a running node pages through the real chain: the node's invariant check
trips, a real Prometheus fires InvariantViolated from the checked-in rule file, a real
Alertmanager routes it, and a webhook receiver (a tiny HTTP server in this test) gets it."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from monotape import metric_names as m
from monotape.alerts import DEFAULT_RULES_PATH
from monotape.testing.prometheus import require_tool, run_alertmanager, run_prometheus, until
from tests.conftest import RunningServer, ServerFactory, mint

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / DEFAULT_RULES_PATH


class Receiver:
    """Alertmanager's webhook payloads, as they arrive (loopback, any free port)."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        lock = threading.Lock()
        payloads = self.payloads

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    payloads.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def alerts(self, name: str, status: str = "firing") -> list[dict[str, Any]]:
        return [
            a
            for p in list(self.payloads)
            for a in p["alerts"]
            if a["labels"].get("alertname") == name and a["status"] == status
        ]


def test_injected_fault_reaches_the_pager_through_prometheus_and_alertmanager(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    require_tool("prometheus", "prometheus")
    require_tool("prometheus-alertmanager", "prometheus-alertmanager")
    server: RunningServer = server_factory.start(
        "--enable-fault-injection", "--rate", "2000", env={"MONOTAPE_SERVER__HDR_INTERVAL_S": "1"}
    )
    admin = mint(server.data_dir, admin=True)
    with Receiver() as receiver:
        am_config = {
            "route": {
                "receiver": "pager",
                "group_by": ["alertname", "invariant"],
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "pager",
                    "webhook_configs": [{"url": f"http://127.0.0.1:{receiver.port}/page"}],
                }
            ],
        }
        with (
            run_alertmanager(tmp_path / "alertmanager", am_config) as am,
            run_prometheus(
                tmp_path / "prometheus",
                [f"127.0.0.1:{server.admin_port}"],
                rule_files=[RULES],
                alertmanager=am.address,
            ) as prom,
        ):
            # Healthy first: the invariants hold, as Prometheus sees them, and nothing pages.
            held = until(
                "the invariants in Prometheus",
                lambda: prom.query(f"{m.INVARIANT_VIOLATION} == 0"),
                timeout_s=30,
            )
            assert {s["metric"]["invariant"] for s in held} >= {"no_dangling_entries"}
            time.sleep(2)  # two evaluations on a sound index
            assert not [a for a in prom.alerts() if a["labels"]["alertname"] == "InvariantViolated"]
            assert not receiver.alerts("InvariantViolated")

            answer = server.post("/admin/faults/dangling-entry", admin)
            assert answer["injected"] == "dangling_entry" and answer["ok"] is False

            paged = until(
                "InvariantViolated at the webhook",
                lambda: receiver.alerts("InvariantViolated"),
                timeout_s=45,
            )
            alert = paged[0]
            assert alert["labels"]["severity"] == "page"
            assert alert["labels"]["invariant"] == "no_dangling_entries"
            assert alert["labels"]["instance"] == f"127.0.0.1:{server.admin_port}"
            assert alert["annotations"]["runbook_url"].endswith("runbooks.md#invariantviolated")
            assert "no_dangling_entries" in alert["annotations"]["summary"]
            # The other invariant still holds: only the corrupted one paged.
            assert {a["labels"]["invariant"] for a in receiver.alerts("InvariantViolated")} == {
                "no_dangling_entries"
            }
