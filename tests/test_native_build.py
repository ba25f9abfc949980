"""setup.py's rule for the native extensions (issue 13, Deliver 3): without a working compiler
the install goes on with the pure-Python twins, except under CI=true, where the failed build
fails it (otherwise CI would quietly compare Python with Python).

The build runs on a copy of setup.py, pyproject.toml and the C sources in a scratch directory,
with ``CC=false`` as the compiler: setup.py's ``BuildExt`` removes a stale in-tree build when a
rebuild fails, which must not touch the checkout the suite runs from."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p.relative_to(ROOT) for p in (ROOT / "monotape").rglob("_*.c"))

pytestmark = pytest.mark.slow


def build(tree: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["CC"] = "false"  # a compiler that fails every file
    if ci:
        env["CI"] = "true"
    cmd = [sys.executable, "setup.py", "build_ext", "--build-lib", "lib", "--build-temp", "tmp"]
    return subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for source in SOURCES:
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, tmp_path / source)
    (tmp_path / "monotape" / "__init__.py").touch()
    return tmp_path


def test_every_extension_is_in_the_build() -> None:
    setup_py = (ROOT / "setup.py").read_text()
    assert len(SOURCES) == 6, SOURCES
    for source in SOURCES:
        module = ".".join(source.with_suffix("").parts[1:])
        assert f'native("{module}")' in setup_py, module


def test_without_a_compiler_the_install_goes_on_with_the_twins(tree: Path) -> None:
    done = build(tree, ci=False)
    assert done.returncode == 0, done.stderr
    for source in SOURCES:  # each one said, none built
        module = ".".join(source.with_suffix("").parts)
        assert f'building extension "{module}" failed' in done.stderr, module
    assert not list((tree / "lib").rglob("*.so"))


def test_under_ci_a_failed_native_build_fails_the_install(tree: Path) -> None:
    done = build(tree, ci=True)
    assert done.returncode != 0
    assert "'false'" in done.stderr  # the compiler's failure, named
    assert not list((tree / "lib").rglob("*.so"))
