"""Hypothesis strategies for any generated message at any version, built from the
same schema model the generator uses (so they need ``../shared/kafka-protocol``)."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

from tests.shared import ROOT

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


@cache
def gen() -> ModuleType:
    path = ROOT / "scripts" / "gen_wire.py"
    spec = importlib.util.spec_from_file_location("gen_wire", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_wire"] = module
    spec.loader.exec_module(module)
    return module


def scalar(ftype: str) -> st.SearchStrategy[Any]:
    if ftype in INT_RANGES:
        lo, hi = INT_RANGES[ftype]
        return st.integers(lo, hi)
    if ftype == "bool":
        return st.booleans()
    if ftype == "float64":
        return st.floats(allow_nan=False)
    if ftype == "string":
        return st.text(max_size=12)
    if ftype in ("bytes", "records"):
        return st.binary(max_size=24)
    if ftype == "uuid":
        return st.uuids()
    raise AssertionError(ftype)


def struct_strategy(
    schema: Any, struct: Any, cls: type, version: int, module: ModuleType, depth: int = 0
) -> st.SearchStrategy[Any]:
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in struct.fields:
        if version not in f.versions:
            continue
        nullable = version in f.nullable
        if f.struct is not None:
            sub_cls = getattr(module, f.struct.cls)
            inner = struct_strategy(schema, f.struct, sub_cls, version, module, depth + 1)
        else:
            inner = scalar(f.elem)
        if f.is_array:
            inner = st.lists(inner, max_size=3 if depth < 2 else 1)
        if nullable:
            inner = st.none() | inner
        fields[f.attr] = inner
    flexible = version in schema.flexible
    if flexible:
        fields["unknown_tagged_fields"] = st.none() | st.lists(
            st.tuples(st.integers(1000, 1010), st.binary(max_size=6)),
            max_size=2,
            unique_by=lambda t: t[0],
        ).map(lambda xs: sorted(xs) or None)
    return st.builds(cls, **fields)


@cache
def schema_index() -> dict[str, tuple[Any, Path]]:
    """Message name -> (parsed schema, schema file)."""
    from tests.shared import SCHEMAS

    out: dict[str, tuple[Any, Path]] = {}
    for path in sorted(SCHEMAS.rglob("*.json")):
        spec = gen().parse_schema(path)
        out[spec.name] = (spec, path)
    # Kafka 4.3's request and response schemas, merged over 3.9's as scripts/gen_wire.py does.
    by_key: dict[int, dict[str, Any]] = {}
    for spec, _ in out.values():
        if spec.kind in ("request", "response"):
            by_key.setdefault(spec.api_key, {})[spec.kind] = spec
    newer = SCHEMAS.parent / gen().NEWER_SCHEMAS_NAME
    for spec in gen().newer_api_schemas(newer, by_key):
        out[spec.name] = (spec, spec.path)
    return out


def message_strategy(cls: type, version: int) -> st.SearchStrategy[Any]:
    schema, _ = schema_index()[cls.NAME]  # type: ignore[attr-defined]
    module = sys.modules[cls.__module__]
    return struct_strategy(schema, schema.top, cls, version, module)
