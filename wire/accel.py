"""The optional C accelerator (``wire/_speedups.c``) and the switch between it and
the pure-Python codec.

The generator writes, beside each module's decode and encode functions, a table of
every struct's layout per version (``_accel_programs()``). When the compiled
extension is present, :func:`enable` points :class:`~wire.primitives.Message`'s
``decode``, ``decode_at``, ``encode`` and ``encode_into`` at it; it interprets those
tables and builds the generated classes' instances directly.

The pure-Python code is the reference: whenever the accelerator cannot finish a
call (malformed input, a limit exceeded, a value it does not handle) it hands the
call to the pure-Python method, so results and errors are the same on both paths.
Set ``CORMORANT_WIRE_PURE=1`` to run without the accelerator.
"""

from __future__ import annotations

import importlib
import os
import sys
import uuid
from typing import Any

from wire.primitives import DEFAULT_LIMITS, Message
from wire.regions import FileRegion

_PURE = {
    "decode": Message.__dict__["decode"],
    "decode_at": Message.__dict__["decode_at"],
    "encode": Message.__dict__["encode"],
    "encode_into": Message.__dict__["encode_into"],
}



def _load() -> Any:
    if os.environ.get("CORMORANT_WIRE_PURE", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("wire._speedups")
    except ImportError:  # built without a compiler, or not built in place
        return None


_speedups: Any = _load()

_tables: dict[str, dict[str, dict[int, object]]] = {}


def _program_for(cls: type, version: int) -> object:
    """The layout of ``cls`` at ``version``, or None to leave it to the Python code."""
    if "_decoders" not in cls.__dict__:
        return None
    name = cls.__module__
    table = _tables.get(name)
    if table is None:
        fn = getattr(sys.modules.get(name), "_accel_programs", None)
        table = fn() if fn is not None else {}
        _tables[name] = table
    prog = table.get(cls.__name__, {}).get(version)
    if not isinstance(prog, tuple) or prog[0] is not cls:
        return None
    return prog


def available() -> bool:
    """Whether the compiled extension could be imported."""
    return _speedups is not None


def enabled() -> bool:
    """Whether Message's methods currently run through the accelerator."""
    return _speedups is not None and Message.__dict__["encode"] is _speedups.encode_method


def enable() -> bool:
    """Routes Message's decode and encode methods through the accelerator, if built."""
    if _speedups is None:
        return False
    sp = _speedups
    sp.configure(
        _program_for,
        _PURE["decode"].__func__,
        _PURE["decode_at"].__func__,
        _PURE["encode"],
        _PURE["encode_into"],
        FileRegion,
        uuid.UUID,
        uuid.SafeUUID.unknown,
        DEFAULT_LIMITS,
    )
    setattr(Message, "decode", classmethod(sp.decode))  # noqa: B010
    setattr(Message, "decode_at", classmethod(sp.decode_at))  # noqa: B010
    setattr(Message, "encode", sp.encode_method)  # noqa: B010
    setattr(Message, "encode_into", sp.encode_into_method)  # noqa: B010
    return True


def disable() -> None:
    """Back to the pure-Python methods."""
    for name, fn in _PURE.items():
        setattr(Message, name, fn)


def enable_by_default() -> None:
    """Enables the accelerator unless CORMORANT_WIRE_PURE is set (then it is not even loaded)."""
    enable()
