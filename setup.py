"""The native extensions: the send loop (monotape/platform/server/_sendmany.c), the stage
recorder's field read (monotape/platform/core/_fields.c), the frame's payloads per signature
(monotape/platform/core/_payloads.c), the record encoders (monotape/platform/wire/_records.c)
and the snapshot table's puts (monotape/platform/ring/_table.c); everything else is in
pyproject.toml.

Each extension is optional so that a machine without a C compiler still installs and runs the
pure-Python fallbacks (monotape.platform.server.sendmany, monotape.platform.core.fields,
monotape.platform.core.payloads, monotape.platform.wire.records, monotape.platform.ring.table).
Under CI=true a failed build fails the install instead: otherwise CI would quietly compare
Python with Python.
"""

import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

STRICT = os.environ.get("CI", "").lower() == "true"
HERE = Path(__file__).resolve().parent


class BuildExt(build_ext):
    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception:
            # An editable install runs the package from the source tree: a build of the
            # previous source left there would outlive this failed rebuild unnoticed.
            (HERE / self.get_ext_filename(ext.name)).unlink(missing_ok=True)
            raise


def native(module: str) -> Extension:
    """The extension ``monotape.<module>`` from its one C file, warnings as errors."""
    return Extension(
        f"monotape.{module}",
        sources=[f"monotape/{module.replace('.', '/')}.c"],
        extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        optional=not STRICT,
    )


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        native("platform.server._sendmany"),
        native("platform.core._fields"),
        native("platform.core._payloads"),
        native("platform.core._admit"),
        native("platform.wire._records"),
        native("platform.ring._table"),
    ],
)
