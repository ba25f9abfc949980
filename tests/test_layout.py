"""The package's layout holds (issue 11, Must show): an ``ast`` walk over every module of monotape/.

Three rules, each test reporting every offender in one failure message:

(a) No import circle anywhere in the package. Every import counts: module level, inside a
    function (a deferred import hides a circle, it does not remove it) and under
    ``if TYPE_CHECKING:`` (a type dependency is still a dependency).
(b) ``platform/core`` and ``platform/wire`` are Sans-I/O: no module there imports a library that
    does I/O (``IO_MODULES``, direct imports) or reaches a room that does (``IO_ROOMS``: server,
    node, role, admin, bus, sdk, loadgen) through any chain of imports; and no product module
    imports the tools that aim load at a node (``monotape.loadgen``) or the test fixtures
    (``monotape.testing``), the command line's ``monotape load`` aside (``TOOL_DISPATCHERS``).
(c) Every module is at most ``MAX_LINES`` lines, unless its module docstring (or, without one,
    its leading comment block) carries a line starting with ``Size:`` (the marker, any case)
    that says why it is longer, e.g. ``Size: one collector per piece of state, ...``.

How imports are read: ``import a.b.c`` is an arrow to ``a.b.c``; ``from a.b import c`` is an
arrow to ``a.b.c`` when that is a module of the package, else to ``a.b``; relative imports are
resolved against the importing module's package. An arrow goes to the module named, not to the
packages around it (their ``__init__`` runs too, but drawing it would make every
``__init__`` that re-exports its room a circle with the room). A compiled extension (a ``.c``
file with its ``.pyi`` stub beside it, like ``ring/_table.c``) is a module too: a leaf, since
its C imports nothing of the package, and outside the size rule, which is for Python.

``KNOWN_OFFENDERS`` is empty (issue 11 removed every offender): anything that offends fails.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "monotape"

MAX_LINES = 400
SIZE_MARKER = re.compile(r"^\s*#?\s*size:", re.IGNORECASE | re.MULTILINE)

# The Sans-I/O rooms and what they must never import (rule b).
SANS_IO_ROOMS = ("monotape.platform.core", "monotape.platform.wire")
IO_MODULES = frozenset(
    {
        "asyncio",
        "socket",
        "prometheus_client",
        "websockets",
        "starlette",
        "uvicorn",
        "nats",
        "psutil",
        "time",  # the wall clock: core takes an injected clock (monotape.clock)
    }
)
IO_ROOMS = (
    "monotape.platform.server",
    "monotape.platform.node",
    "monotape.platform.role",
    "monotape.platform.admin",
    "monotape.platform.bus",
    "monotape.platform.sdk",
    "monotape.loadgen",
)
NOT_PRODUCT = ("monotape.loadgen", "monotape.testing")
# The command line is the one product module that reaches the tools: `monotape load` (and
# `monotape load churn`) is one of its commands (docs/design.md, CLI) and dispatches to loadgen
# through commands/load.py, which holds those subcommands.
TOOL_DISPATCHERS = frozenset({"monotape.cli", "monotape.commands.load"})

# Empty since issue 11 landed: every offender was removed. Each entry would be (rule, what): a
# circle as its sorted members joined by " <-> ", an import as "importer -> imported", a module
# by name. Never add a new offender here: fix it, or (size) give the module a 'Size:' line.
KNOWN_OFFENDERS: frozenset[tuple[str, str]] = frozenset()


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    lines: int
    imports: set[str] = field(default_factory=set)  # every module named, internal or not


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _resolve_from(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    # Relative: level 1 is the importing module's own package.
    package = module.name.split(".")
    if not module.is_package:
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(module: Module, tree: ast.AST, known: set[str]) -> Iterator[str]:
    # ast.walk reaches every import: module level, inside functions, under TYPE_CHECKING.
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in known else base


def read_package(root: Path = PACKAGE) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    trees: dict[str, ast.AST] = {}
    for path in sorted(root.rglob("*.py")):
        name, is_package = _module_name(path, root.parent)
        text = path.read_text(encoding="utf-8")
        modules[name] = Module(name, path, is_package, len(text.splitlines()))
        trees[name] = ast.parse(text, filename=str(path))
    for path in sorted(root.rglob("*.c")):
        if path.with_suffix(".pyi").exists():  # an extension module: a leaf, no Python lines
            name, _ = _module_name(path, root.parent)
            modules[name] = Module(name, path, False, 0)
    known = set(modules)
    for name, module in modules.items():
        if name in trees:
            module.imports = set(_imports(module, trees[name], known)) - {name}
    return modules


def _internal(name: str, modules: dict[str, Module]) -> str | None:
    """The module of the package that ``name`` names (itself, or its nearest parent module)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _in(name: str, rooms: Iterable[str]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in rooms)


def circles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph = {
        name: sorted({t for i in m.imports if (t := _internal(i, modules)) and t != name})
        for name, m in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            edges = graph[node]
            if i < len(edges):
                work.append((node, i + 1))
                nxt = edges[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def circle_offenders(modules: dict[str, Module]) -> list[tuple[str, str]]:
    return [("circle", " <-> ".join(c)) for c in circles(modules)]


def _chain_to_io_room(start: str, modules: dict[str, Module]) -> str | None:
    """The shortest import chain from ``start`` to a module of ``IO_ROOMS``, as text, if any:
    a Sans-I/O module that reaches the server through a third module still depends on it."""
    parent: dict[str, str] = {start: ""}
    queue = [start]
    for name in queue:
        for imported in sorted(modules[name].imports):
            target = _internal(imported, modules)
            if target is None or target in parent:
                continue
            parent[target] = name
            if _in(target, IO_ROOMS):
                chain = [target]
                while parent[chain[-1]]:
                    chain.append(parent[chain[-1]])
                return " -> ".join(reversed(chain))
            queue.append(target)
    return None


def io_offenders(modules: dict[str, Module]) -> list[tuple[str, str]]:
    out = []
    for name, m in sorted(modules.items()):
        sans_io = _in(name, SANS_IO_ROOMS)
        product = not _in(name, NOT_PRODUCT) and name not in TOOL_DISPATCHERS
        for imported in sorted(m.imports):
            if sans_io and imported.split(".")[0] in IO_MODULES:
                out.append(("io", f"{name} -> {imported}"))
            elif product and _in(imported, NOT_PRODUCT):
                out.append(("tools", f"{name} -> {imported}"))
        chain = _chain_to_io_room(name, modules) if sans_io else None
        if chain is not None:
            out.append(("io", chain))
    return out


def _size_reason(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    if doc is not None:
        return bool(SIZE_MARKER.search(doc))
    head = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        head.append(line)
    return bool(SIZE_MARKER.search("\n".join(head)))


def size_offenders(modules: dict[str, Module]) -> list[tuple[str, str]]:
    return [
        ("size", name)
        for name, m in sorted(modules.items())
        if m.lines > MAX_LINES and not _size_reason(m.path)
    ]


def _check(offenders: list[tuple[str, str]], rule: str, how: str) -> None:
    new = [o for o in offenders if o not in KNOWN_OFFENDERS]
    if new:
        shown = "\n".join(f"  {what}" for _, what in new)
        pytest.fail(f"{len(new)} {rule}:\n{shown}\n{how}", pytrace=False)


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return read_package()


def test_no_import_circle(modules: dict[str, Module]) -> None:
    _check(
        circle_offenders(modules),
        "import circle(s) in monotape/ (TYPE_CHECKING and deferred imports included)",
        "Break the circle: move the shared piece down, or depend on a small Protocol.",
    )


def test_sans_io_rooms_and_no_tools_in_the_product(modules: dict[str, Module]) -> None:
    _check(
        io_offenders(modules),
        "forbidden import(s): core/wire doing I/O (io) or product importing loadgen/testing",
        "core/ and wire/ take values and return values; "
        "I/O lives in server/, node/, role/, admin/, bus/, sdk/.",
    )


def test_modules_are_small_or_say_why(modules: dict[str, Module]) -> None:
    _check(
        size_offenders(modules),
        f"module(s) over {MAX_LINES} lines without a 'Size:' line in the docstring",
        "Split it along its seams, or say why it is one piece in a 'Size: ...' docstring line.",
    )


def test_the_allow_list_holds_only_live_offenders(modules: dict[str, Module]) -> None:
    """An entry that no longer offends must leave KNOWN_OFFENDERS (so the list only shrinks)."""
    live = set(circle_offenders(modules) + io_offenders(modules) + size_offenders(modules))
    stale = sorted(KNOWN_OFFENDERS - live)
    assert not stale, f"no longer offending, remove from KNOWN_OFFENDERS: {stale}"


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The reader itself: a circle through a TYPE_CHECKING import, a relative import and a
    deferred one; an I/O import in a Sans-I/O room; a long module with and without 'Size:'."""
    pkg = tmp_path / "monotape"
    (pkg / "platform" / "core").mkdir(parents=True)
    for init in (pkg, pkg / "platform", pkg / "platform" / "core"):
        (init / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from monotape import b\n"
    )
    (pkg / "b.py").write_text("def f() -> None:\n    from . import c\n")
    (pkg / "c.py").write_text("from .a import f\n")
    (pkg / "platform" / "core" / "stage.py").write_text("from time import monotonic\n")
    (pkg / "platform" / "core" / "ok.py").write_text("from ..core import stage\n")
    (pkg / "platform" / "core" / "via.py").write_text("import monotape.c\n")
    long = "\n".join(["x = 1"] * (MAX_LINES + 1))
    (pkg / "long.py").write_text(long)
    (pkg / "long_ok.py").write_text('"""Long.\n\nSize: one table, read top to bottom."""\n' + long)
    found = read_package(pkg)
    assert found["monotape.platform.core.ok"].imports == {"monotape.platform.core.stage"}
    assert circles(found) == [["monotape.a", "monotape.b", "monotape.c"]]
    assert io_offenders(found) == [("io", "monotape.platform.core.stage -> time")]
    (pkg / "platform" / "server").mkdir()
    (pkg / "platform" / "server" / "__init__.py").write_text("")
    (pkg / "b.py").write_text("import monotape.platform.server\n")
    found = read_package(pkg)
    assert ("io", "monotape.platform.core.via -> monotape.c -> monotape.a -> monotape.b -> "
            "monotape.platform.server") in io_offenders(found)  # fmt: skip
    assert size_offenders(found) == [("size", "monotape.long")]
