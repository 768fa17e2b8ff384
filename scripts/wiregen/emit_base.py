"""What every emitter of a generated module shares: its formats, functions and helpers."""

from __future__ import annotations

from wiregen.schema import FieldSpec, SchemaSpec, StructSpec


class WriterState:
    """The state of one module being emitted, and the helpers the emitters share."""

    def __init__(self, schemas: list[SchemaSpec]) -> None:
        self.schemas = schemas
        self.formats: dict[str, str] = {}
        self.functions: list[str] = []
        self.fn_by_body: dict[str, str] = {}
        self.memo: dict[tuple[str, str, int], str] = {}
        self.uses_uuid = False
        self.uses_regions = False
        self.programs: list[str] = []
        self.program_by_text: dict[str, str] = {}

    # ---- helpers

    def fmt(self, codes: str) -> str:
        if codes not in self.formats:
            self.formats[codes] = f"_F{len(self.formats)}"
        return self.formats[codes]

    def flexible(self, spec: SchemaSpec, f: FieldSpec, v: int) -> bool:
        if f.flexible_override is not None:
            return v in f.flexible_override
        return v in spec.flexible

    def default_expr(self, f: FieldSpec) -> str:
        d = f.default
        if f.is_array:
            return "None" if d is None else "[]"
        if f.struct is not None:
            return "None" if d is None else f"{f.struct.cls}()"
        if d == "ZERO_UUID":
            return "ZERO_UUID"
        return repr(d)

    def annotation(self, f: FieldSpec) -> str:
        nullable = not f.nullable.empty or f.default is None
        elem = f.elem
        if f.struct is not None:
            base = f.struct.cls
        elif elem == "records":
            return "RecordsData | None"
        else:
            base = {
                "bool": "bool",
                "int8": "int",
                "int16": "int",
                "uint16": "int",
                "int32": "int",
                "uint32": "int",
                "int64": "int",
                "float64": "float",
                "uuid": "uuid.UUID",
                "string": "str",
                "bytes": "bytes",
            }[elem]
        if f.is_array:
            return f"list[{base}] | None" if nullable else f"list[{base}]"
        return f"{base} | None" if nullable else base

    def is_default_test(self, f: FieldSpec, expr: str) -> str:
        """An expression true when ``expr`` holds the field's default."""
        if f.is_array:
            return f"{expr} is None" if f.default is None else f"not {expr}"
        if f.struct is not None:
            return f"{expr} is None" if f.default is None else f"{expr} == {f.struct.cls}()"
        if f.default is None:
            return f"{expr} is None"
        if f.default == "ZERO_UUID":
            return f"{expr} == ZERO_UUID"
        return f"{expr} == {f.default!r}"

    def register(self, text: str, name: str) -> str:
        existing = self.fn_by_body.get(text)
        if existing is not None:
            return existing
        self.fn_by_body[text] = name
        self.functions.append(text.replace("def FN(", f"def {name}(", 1))
        return name

    @staticmethod
    def string_reader(compact: bool, nullable: bool) -> str:
        return {
            (False, False): "read_string",
            (False, True): "read_nullable_string",
            (True, False): "read_compact_string",
            (True, True): "read_compact_nullable_string",
        }[(compact, nullable)]

    @staticmethod
    def string_writer(compact: bool, nullable: bool) -> str:
        return {
            (False, False): "write_string",
            (False, True): "write_nullable_string",
            (True, False): "write_compact_string",
            (True, True): "write_compact_nullable_string",
        }[(compact, nullable)]

    def has_unknown(self, spec: SchemaSpec, st: StructSpec) -> bool:
        return not spec.flexible.empty and spec.flexible.low <= spec.valid.high
