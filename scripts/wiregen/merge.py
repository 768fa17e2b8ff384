"""Kafka 4.3's schemas merged over 3.9's: new versions spoken, old clients kept."""

from __future__ import annotations

from pathlib import Path

from wiregen.schema import SchemaSpec, StructSpec, Versions, load_json, parse_schema

#: APIs kept at their 3.9 schemas: Vote renamed its fields in 4.x (the quorum here is not
#: Kafka's Raft, and these messages are never spoken).
OLDER_APIS = frozenset({52})
#: APIs taken from 4.3 as they are: the share-group RPCs of KIP-932 were early access
#: in 3.9 and changed their version 0 since.
REDEFINED_APIS = frozenset({76, 77, 78, 79, 83, 84, 85, 86, 87})


def _field_layout(spec: SchemaSpec, struct: StructSpec, v: int) -> tuple[object, ...]:
    """What decides the bytes of ``struct`` at version ``v``: every field present, in order."""
    out: list[object] = []
    for f in struct.fields:
        if v not in f.versions:
            continue
        flexible = v in f.flexible_override if f.flexible_override is not None else v in spec.flexible
        sub = _field_layout(spec, f.struct, v) if f.struct is not None else None
        out.append((f.name, f.type, v in f.nullable, f.tag if v in f.tagged else None, flexible, sub))
    return tuple(out)


def merge_schemas(older: SchemaSpec, newer: SchemaSpec) -> SchemaSpec:
    """``newer`` (4.3) extended down to ``older``'s (3.9) lowest version.

    Kafka 4 dropped old versions (KIP-896) and with them fields only those versions had
    (ListOffsets v0's MaxNumOffsets, OffsetCommit v1's CommitTimestamp, ...); those fields
    are put back where 3.9 had them. Every version must then lay out exactly as the schema
    that defines it, or generation stops.
    """
    merged_ids: set[int] = set()

    def merge(old: StructSpec, new: StructSpec) -> None:
        if id(new) in merged_ids:
            return
        merged_ids.add(id(new))
        new_by_name = {f.name: f for f in new.fields}
        position = 0
        for f in old.fields:
            if f.name in new_by_name:
                nf = new_by_name[f.name]
                position = new.fields.index(nf) + 1
                if f.struct is not None and nf.struct is not None:
                    merge(f.struct, nf.struct)
                continue
            if f.struct is not None or f.versions.high >= newer.valid.low:
                raise SystemExit(f"{newer.name}: cannot merge {old.name}.{f.name} from the older schema")
            new.fields.insert(position, f)
            position += 1

    if older.flexible != newer.flexible:
        raise SystemExit(f"{newer.name}: flexible versions differ between the schemas")
    newer_layouts = {v: _field_layout(newer, newer.top, v) for v in range(newer.valid.low, newer.valid.high + 1)}
    merge(older.top, newer.top)
    own_low = newer.valid.low
    newer.valid = Versions(min(older.valid.low, newer.valid.low), newer.valid.high)
    # Versions 3.9 deprecated, and those Kafka 4 removed, stay deprecated.
    deprecated_high = max(own_low - 1, older.deprecated.high, newer.deprecated.high)
    if deprecated_high >= newer.valid.low:
        newer.deprecated = Versions(newer.valid.low, deprecated_high)
    for v in range(newer.valid.low, newer.valid.high + 1):
        layout = _field_layout(newer, newer.top, v)
        if (v in older.valid and layout != _field_layout(older, older.top, v)) or layout != newer_layouts.get(v, layout):
            raise SystemExit(f"{newer.name} v{v}: the merged layout differs from a source schema's")
    return newer


def newer_api_schemas(
    newer: Path, older_by_key: dict[int, dict[str, SchemaSpec]], older_apis: frozenset[int] = OLDER_APIS
) -> list[SchemaSpec]:
    """The request and response schemas taken from Kafka 4.3: APIs new in 4.3, and every API
    both define (merged with 3.9's, see :func:`merge_schemas`) except ``older_apis``.
    Schemas 4.3 only keeps as removed stubs (no fields) stay 3.9's."""
    out: list[SchemaSpec] = []
    for p in sorted((newer / "messages").glob("*Re*.json")):
        if not p.stem.endswith(("Request", "Response")):
            continue
        raw = load_json(p)
        key = raw.get("apiKey")
        if not isinstance(key, int) or key in older_apis or "fields" not in raw:
            continue
        s = parse_schema(p)
        if s.kind not in ("request", "response"):
            continue
        old = older_by_key.get(key, {}).get(s.kind)
        if old is not None and old.name == s.name and key not in REDEFINED_APIS:
            s = merge_schemas(old, s)
        elif old is not None and key not in REDEFINED_APIS and old.valid.low < s.valid.low:
            raise SystemExit(f"{s.name}: renamed from {old.name} and drops its versions below {s.valid.low}")
        out.append(s)
    return out
