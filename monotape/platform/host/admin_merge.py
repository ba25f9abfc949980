"""The host's admin answers from its roles' answers: pure functions, bodies in, one body out.

Each role answered with the node's own JSON (host/state.py); these add it up the way an SRE
reads a host: the node's fields, totalled over the writers (or feed handlers), plus a
``writers`` (``processes``) breakdown and ``missing``, the roles that did not answer (left out
of every total: a host with a stuck writer still answers, and says whose numbers are absent).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "merge_connections",
    "merge_drain",
    "merge_feeds",
    "merge_gc",
    "merge_gc_collect",
    "merge_glass",
    "merge_invariants",
    "merge_symbol",
]

Bodies = Mapping[str, Mapping[str, Any]]  # process name -> its answer


def _sum_counts(maps: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for one in maps:
        total.update({k: int(v) for k, v in one.items()})
    return dict(sorted(total.items()))


def merge_drain(bodies: Bodies, missing: Sequence[str] = ()) -> dict[str, Any]:
    """The node's drain status over every writer: counts summed, ``draining`` while any writer
    still is, ``drained`` once every one that drains has finished; timings the slowest's."""
    statuses = list(bodies.values())
    out: dict[str, Any] = {
        "draining": any(s.get("draining") for s in statuses),
        "connections": sum(int(s.get("connections", 0)) for s in statuses),
    }
    started = [s for s in statuses if "drained" in s]
    if started:
        out["drained"] = all(s["drained"] for s in started)
        for key in ("total", "closed", "remaining", "per_step"):
            out[key] = sum(int(s.get(key, 0)) for s in started)
        for key in ("interval_s", "elapsed_s", "expected_s"):
            out[key] = max(float(s.get(key, 0.0)) for s in started)
    out["writers"] = {name: dict(s) for name, s in bodies.items()}
    out["missing"] = list(missing)
    return out


def merge_connections(bodies: Bodies, limit: int, missing: Sequence[str] = ()) -> dict[str, Any]:
    """``count``, ``signatures`` (each writer's index counts its own) and ``disconnects``
    summed; ``drain`` merged; the first ``limit`` rows across writers, each naming its writer
    (connection ids are per writer)."""
    rows: list[dict[str, Any]] = []
    writers: dict[str, Any] = {}
    for name, body in bodies.items():
        for row in body.get("connections", []):
            if len(rows) >= limit:
                break
            rows.append({"writer": name, **row})
        writers[name] = {
            "count": int(body.get("count", 0)),
            "signatures": int(body.get("signatures", 0)),
            "disconnects": dict(body.get("disconnects", {})),
        }
    drains = {name: body["drain"] for name, body in bodies.items() if "drain" in body}
    drain = merge_drain(drains)
    drain.pop("writers")
    drain.pop("missing")
    return {
        "count": sum(w["count"] for w in writers.values()),
        "signatures": sum(w["signatures"] for w in writers.values()),
        "disconnects": _sum_counts([w["disconnects"] for w in writers.values()]),
        "drain": drain,
        "connections": rows,
        "writers": writers,
        "missing": list(missing),
    }


def merge_feeds(bodies: Bodies, source: str | None, missing: Sequence[str] = ()) -> dict[str, Any]:
    """One row per feed handler process (the node's row, plus ``process``), and how many are
    up of those that answered; ``source`` as the handlers say (None when none answered)."""
    rows = [
        {**row, "process": name}
        for name, body in bodies.items()
        for row in body.get("handlers", [])
    ]
    return {
        "handlers": rows,
        "up": sum(1 for r in rows if r.get("up")),
        "source": source,
        "missing": list(missing),
    }


def merge_invariants(bodies: Bodies, missing: Sequence[str] = ()) -> dict[str, Any]:
    """Every writer checks its own terminals: ``ok`` only when each writer that answered held
    every invariant (and one answered); ``trips`` and ``runs`` summed; each result names its
    writer, and ``violations`` lists the failing ones first-hand."""
    results = [
        {**r, "writer": name} for name, body in bodies.items() for r in body.get("results", [])
    ]
    return {
        "ok": bool(bodies) and all(bool(b.get("ok")) for b in bodies.values()),
        "interval_s": max((float(b.get("interval_s", 0.0)) for b in bodies.values()), default=0.0),
        "runs": sum(int(b.get("runs", 0)) for b in bodies.values()),
        "trips": _sum_counts([b.get("trips", {}) for b in bodies.values()]),
        "results": results,
        "violations": [r for r in results if not r.get("ok")],
        "writers": {
            name: {"ok": bool(b.get("ok")), "runs": b.get("runs", 0), "trips": b.get("trips", {})}
            for name, b in bodies.items()
        },
        "missing": list(missing),
    }


def merge_glass(bodies: Bodies, missing: Sequence[str] = ()) -> dict[str, Any]:
    """Totals summed; ``last`` the latest offender over every writer (by its wall clock), named
    by writer."""
    last: dict[str, Any] | None = None
    for name, body in bodies.items():
        offender = body.get("last")
        if offender and (last is None or offender.get("wall_s", 0) >= last.get("wall_s", 0)):
            last = {**offender, "writer": name}
    keys = ("regressions", "gaps", "regressing_terminals", "reports")
    out: dict[str, Any] = {k: sum(int(b.get(k, 0)) for b in bodies.values()) for k in keys}
    out["last"] = last
    out["writers"] = {name: {k: b.get(k, 0) for k in keys} for name, b in bodies.items()}
    out["missing"] = list(missing)
    return out


def merge_gc(bodies: Bodies, missing: Sequence[str] = ()) -> dict[str, Any]:
    """The node's GC answer per process, and the collections and pause time of each
    generation summed over them."""
    gens: dict[str, dict[str, float]] = {}
    for body in bodies.values():
        for gen, g in body.get("gc", {}).get("generations", {}).items():
            t = gens.setdefault(gen, {"collections": 0, "pause_total_s": 0.0, "pause_max_ms": 0.0})
            t["collections"] += int(g.get("collections", 0))
            t["pause_total_s"] += float(g.get("pause_total_s", 0.0))
            t["pause_max_ms"] = max(t["pause_max_ms"], float(g.get("pause_max_ms", 0.0)))
    return {
        "total": {"generations": gens},
        "processes": {name: dict(b) for name, b in bodies.items()},
        "missing": list(missing),
    }


def merge_gc_collect(bodies: Bodies, missing: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "collected": sum(int(b.get("collected", 0)) for b in bodies.values()),
        "processes": {name: dict(b) for name, b in bodies.items()},
        "missing": list(missing),
    }


def merge_symbol(
    key: str,
    iid: int,
    decimals: int,
    prices: Mapping[str, Any] | None,
    writers: Bodies,
    missing: Sequence[str] = (),
) -> dict[str, Any]:
    """The node's ``/admin/symbols/{key}``: prices from the sequencer (``prices`` None when it
    did not answer: then ``current`` and ``published`` are null and it is in ``missing``),
    subscriber signatures summed over the writers (each counts its own terminals')."""
    per_writer = {name: int(b.get("subscriber_signatures", 0)) for name, b in writers.items()}
    return {
        "key": key,
        "iid": iid,
        "price_decimals": decimals,
        "price_scale": 10**decimals,
        "current": prices.get("current") if prices else None,
        "published": prices.get("published") if prices else None,
        "subscriber_signatures": sum(per_writer.values()),
        "writers": per_writer,
        "missing": list(missing),
    }
