"""Loading a native extension's AddressSanitizer + UndefinedBehaviorSanitizer build for its tests
(``make native-sanitize`` names the shared object in an environment variable)."""

from __future__ import annotations

import importlib.util
from types import ModuleType


def load_sanitized(name: str, path: str) -> ModuleType:
    """The instrumented build at ``path``, as module ``name``; it must say it is one."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.SANITIZED is True, "the sanitizer run must load the instrumented build"
    return module
