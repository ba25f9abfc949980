"""``python -m monotape.platform.host ROLE SPEC_JSON``: start one role of the host."""

from __future__ import annotations

import importlib
import sys

from monotape.platform.host.spec import ROLES, RoleSpec


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ROLES:
        print(
            f"usage: python -m monotape.platform.host {{{','.join(ROLES)}}} SPEC_JSON",
            file=sys.stderr,
        )
        return 2
    spec = RoleSpec.decode(argv[1])
    module = importlib.import_module(f"monotape.platform.host.{argv[0]}")
    return int(module.main(spec))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
