"""What the host tells a role process: one JSON document on its command line.

The host writes the effective ``Config`` once to ``run_dir/config.json`` (msgspec JSON) and
starts each role as ``python -m monotape.platform.host ROLE SPEC_JSON``; a role reads the config
from there, never from the environment. ``run_dir`` is private to one host run (mode 0700): the
roles' sockets and port files live there, and the host removes it at stop.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from monotape.config import Config

__all__ = ["ROLES", "RoleSpec", "load_config", "write_config"]

ROLES = ("venue", "handler", "sequencer", "writer")


class RoleSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    role: str  # one of ROLES
    index: int = 0  # writer 0..N-1; handler: 0 for the A side, 1 for B
    name: str = ""  # the process's name in logs and the ``process`` label: "writer-0"
    run_dir: str  # private directory of this host run (sockets, port files, config.json)
    ring: str = ""  # the frame ring's /dev/shm segment name (created by the host)
    interest: str = ""  # the priority-interest segment name (created by the host)
    writers: int = 0  # how many writer processes the host runs
    host_pid: int = 0  # the host process: a role whose host is gone exits by itself
    restarts: int = 0  # how many times the host restarted this role before (0: first start)
    venue: str = ""  # handler role: its one venue; empty (as the host plans it): every venue
    handler: str = ""  # handler role: which of each venue's two handlers, "A" or "B"
    beats: str = ""  # the liveness segment's name (host/beats.py); empty: no beat
    beat_slot: int = 0  # this process's slot in it
    # A warm standby (the sequencer's): imports, then waits for the spec it runs with on its
    # stdin (one JSON line, the host's takeover) before it touches the ring (lifeline.py).
    standby: bool = False

    def encode(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def decode(cls, text: str | bytes) -> RoleSpec:
        return msgspec.json.decode(text, type=cls)

    @property
    def config_path(self) -> Path:
        return Path(self.run_dir) / "config.json"


def write_config(cfg: Config, run_dir: Path) -> Path:
    path = run_dir / "config.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.encode(cfg))
    tmp.replace(path)
    return path


def load_config(spec: RoleSpec) -> Config:
    return msgspec.json.decode(spec.config_path.read_bytes(), type=Config)
