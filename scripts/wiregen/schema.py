"""The schema model: Kafka's JSON message schemas, parsed into specs the emitters read."""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

#: Coordinator records only ship with the 3.9 schemas; the tagged fields Kafka 4 added to
#: them (same names, tags and defaults as Kafka 4's records) are appended here, so that a
#: record written by either reads the same. TransactionLogValue (KIP-890): the previous
#: and next producer ids of an epoch-exhausted transactions-v2 producer, and the
#: transaction version the client spoke.
KAFKA4_TAGGED_FIELDS: dict[str, list[dict[str, object]]] = {
    "TransactionLogValue": [
        {"name": "PreviousProducerId", "type": "int64", "versions": "1+", "taggedVersions": "1+", "tag": 0,
         "default": -1},
        {"name": "NextProducerId", "type": "int64", "versions": "1+", "taggedVersions": "1+", "tag": 1,
         "default": -1},
        {"name": "ClientTransactionVersion", "type": "int16", "versions": "1+", "taggedVersions": "1+", "tag": 2,
         "default": 0},
    ],
}

FIXED: dict[str, tuple[str, int]] = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "uuid": ("16s", 16),
}
PRIMITIVES = set(FIXED) | {"string", "bytes", "records"}

# ------------------------------------------------------------------ schema model


@dataclass(frozen=True)
class Versions:
    low: int
    high: int  # inclusive; a large number for "N+"

    @staticmethod
    def parse(text: str | None) -> Versions:
        if text is None or text == "none":
            return Versions(0, -1)
        text = str(text).strip()
        if text.endswith("+"):
            return Versions(int(text[:-1]), 1 << 15)
        if "-" in text:
            lo, hi = text.split("-")
            return Versions(int(lo), int(hi))
        return Versions(int(text), int(text))

    def __contains__(self, v: int) -> bool:
        return self.low <= v <= self.high

    @property
    def empty(self) -> bool:
        return self.high < self.low


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    s = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", s).lower()
    if keyword.iskeyword(s) or s in {"encode", "decode", "version"}:
        s += "_"
    return s


@dataclass
class FieldSpec:
    name: str
    attr: str
    type: str  # as in the schema, e.g. "int32", "[]string", "[]Topic", "Cursor"
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: object
    ignorable: bool
    flexible_override: Versions | None
    struct: StructSpec | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class StructSpec:
    name: str  # schema name
    cls: str  # Python class name
    fields: list[FieldSpec] = field(default_factory=list)


@dataclass
class SchemaSpec:
    path: Path
    name: str
    kind: str  # request, response, header, data, metadata
    api_key: int | None
    valid: Versions
    flexible: Versions
    deprecated: Versions
    listeners: list[str]
    latest_unstable: bool
    top: StructSpec
    structs: list[StructSpec]  # post-order: children before parents, top last


def load_json(path: Path) -> dict[str, object]:
    lines = [ln for ln in path.read_text().splitlines() if not ln.strip().startswith("//")]
    data: dict[str, object] = json.loads("\n".join(lines))
    return data


def parse_default(ftype: str, raw: object, nullable: bool) -> object:
    """The field's default as a Python literal value (None, int, float, bool, str, bytes)."""
    if ftype.startswith("[]"):
        return None if raw in ("null", None) and raw is not None else []
    if raw in ("null", "None"):
        return None
    if ftype in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(str(raw), 0) if raw is not None and raw != "" else 0
    if ftype == "float64":
        return float(str(raw)) if raw is not None and raw != "" else 0.0
    if ftype == "bool":
        return str(raw).lower() == "true" if raw is not None else False
    if ftype == "string":
        return str(raw) if raw is not None else ""
    if ftype == "bytes":
        return b""
    if ftype == "records":
        return None
    if ftype == "uuid":
        return "ZERO_UUID"
    return "STRUCT"  # a struct: a fresh default instance


def parse_schema(path: Path) -> SchemaSpec:
    data = load_json(path)
    name = str(data["name"])
    kind = str(data["type"])
    valid = Versions.parse(str(data["validVersions"]))
    common: dict[str, list[dict[str, object]]] = {}
    for cs in data.get("commonStructs", []) or []:  # type: ignore[attr-defined]
        common[cs["name"]] = cs["fields"]
    prefix = name
    structs: list[StructSpec] = []
    by_name: dict[str, StructSpec] = {}

    def class_name(struct_name: str) -> str:
        if struct_name.startswith(prefix):
            return struct_name
        return prefix + struct_name

    def build_struct(sname: str, raw_fields: list[dict[str, object]], cls: str) -> StructSpec:
        spec = StructSpec(sname, cls)
        for rf in raw_fields:
            ftype = str(rf["type"])
            nullable = Versions.parse(rf.get("nullableVersions"))  # type: ignore[arg-type]
            fs = FieldSpec(
                name=str(rf["name"]),
                attr=snake(str(rf["name"])),
                type=ftype,
                versions=Versions.parse(str(rf["versions"])),
                nullable=nullable,
                tagged=Versions.parse(rf.get("taggedVersions")),  # type: ignore[arg-type]
                tag=int(rf["tag"]) if "tag" in rf else None,  # type: ignore[call-overload]
                default=None,
                ignorable=bool(rf.get("ignorable", False)),
                flexible_override=(
                    Versions.parse(str(rf["flexibleVersions"])) if "flexibleVersions" in rf else None
                ),
            )
            elem = fs.elem
            if elem not in PRIMITIVES:
                if "fields" in rf:
                    sub = build_struct(elem, rf["fields"], class_name(elem))  # type: ignore[arg-type]
                elif elem in by_name:
                    sub = by_name[elem]
                elif elem in common:
                    sub = build_struct(elem, common[elem], class_name(elem))
                else:
                    raise SystemExit(f"{path.name}: unknown type {ftype}")
                fs.struct = sub
            raw_default = rf.get("default")
            if fs.is_array:
                fs.default = None if raw_default == "null" else []
            else:
                fs.default = parse_default(ftype if elem in PRIMITIVES else "struct", raw_default, not nullable.empty)
                if elem not in PRIMITIVES and raw_default is None and not nullable.empty and fs.tag is None:
                    # A nullable struct with no default is null until set.
                    fs.default = None
            spec.fields.append(fs)
        if sname not in by_name:
            by_name[sname] = spec
            structs.append(spec)
        return spec

    fields = [*data["fields"], *KAFKA4_TAGGED_FIELDS.get(name, [])]  # type: ignore[misc]
    top = build_struct(name, fields, name)
    return SchemaSpec(
        path=path,
        name=name,
        kind=kind,
        api_key=int(data["apiKey"]) if "apiKey" in data else None,  # type: ignore[call-overload]
        valid=valid,
        flexible=Versions.parse(str(data["flexibleVersions"])),
        deprecated=Versions.parse(data.get("deprecatedVersions")),  # type: ignore[arg-type]
        listeners=list(data.get("listeners", []) or []),  # type: ignore[call-overload]
        latest_unstable=bool(data.get("latestVersionUnstable", False)),
        top=top,
        structs=structs,
    )
