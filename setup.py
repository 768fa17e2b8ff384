"""Builds the optional C accelerator of wire/ (everything else is in pyproject.toml).

The extension is optional: without a compiler, or with CORMORANT_WIRE_PURE=1 set at
build time, the package installs without it and the pure-Python codec is used.
"""

import os

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("CORMORANT_WIRE_PURE", "") in ("", "0"):
    ext_modules.append(Extension("wire._speedups", ["wire/_speedups.c"], optional=True))

setup(ext_modules=ext_modules)
