"""A test-only host: the real ``monotape run --writers N`` foreground (``run_host``) over test-only
roles (fake_role.py): ``python -m tests.host.fake_host DATA_DIR RUN_BASE WRITERS STOP_TIMEOUT_S``.

Same banner, signals, supervision, admin API and stop as the real host; only the role processes
are stand-ins, so the supervision tests do not depend on the real roles (or on a quiet machine).
"""

from __future__ import annotations

import asyncio
import sys

from monotape import log
from monotape.commands.foreground import run_host
from monotape.config import load_config
from monotape.platform.host.host import Host
from monotape.platform.host.spec import RoleSpec


def fake_command(spec: RoleSpec) -> list[str]:
    return [sys.executable, "-m", "tests.host.fake_role", spec.role, spec.encode()]


def fake_specs(writers: int) -> list[RoleSpec]:
    specs = [RoleSpec(role="sequencer", name="sequencer", run_dir="", writers=writers)]
    specs += [
        RoleSpec(role="writer", index=i, name=f"writer-{i}", run_dir="", writers=writers)
        for i in range(writers)
    ]
    specs.append(RoleSpec(role="handler", name="handler-A", run_dir="", handler="A"))
    specs.append(RoleSpec(role="venue", name="venue", run_dir="", writers=writers))
    return specs


def main(argv: list[str]) -> int:
    data_dir, run_base, writers, stop_s = argv[0], argv[1], int(argv[2]), float(argv[3])
    cfg = load_config(
        overrides={
            "data_dir": data_dir,
            "server.ws_port": 0,
            "server.admin_port": 0,
            "host.writers": writers,
            "host.run_base": run_base,
            "host.stop_timeout_s": stop_s,
            "host.restart_cap_s": 1.0,
            # generous: the tests read every role's metrics through the host on a busy machine
            "host.scrape_timeout_s": 10.0,
        }
    )
    log.configure(cfg.log_level)
    host = Host(cfg, specs=fake_specs(writers), command=fake_command)
    return asyncio.run(run_host(cfg, None, host=host))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
