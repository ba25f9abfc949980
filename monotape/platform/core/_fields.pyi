# Stub of the C extension (_fields.c); the documented API is monotape.platform.core.fields.
from collections.abc import Iterable
from typing import Any

SANITIZED: bool

def int64_field(items: Iterable[Any], member: Any, /) -> bytes: ...
