"""Emits each module's layout tables, which the optional C accelerator (wire/_speedups.c) interprets."""

from __future__ import annotations

from wiregen.emit_base import WriterState
from wiregen.schema import FIXED, FieldSpec, SchemaSpec, StructSpec


class AccelEmitter(WriterState):
    # ---- layout tables for the optional C accelerator

    def accel_default(self, f: FieldSpec) -> tuple[str, str]:
        """How the accelerator makes (and tests for) a field's default: kind and value."""
        d = self.default_expr(f)
        if d == "[]":
            return "list", "None"
        if f.struct is not None and d != "None":
            return "new", f.struct.cls
        return "const", d

    def accel_op(self, spec: SchemaSpec, f: FieldSpec, v: int) -> str:
        compact = self.flexible(spec, f, v)
        nullable = v in f.nullable
        elem = f.elem
        if f.is_array:
            if f.struct is not None:
                inner = f"('struct', {self.accel_program(spec, f.struct, v)}, False)"
            elif elem in FIXED:
                inner = f"({elem!r},)"
            elif elem == "string":
                inner = f"('string', {compact}, False)"
            elif elem == "bytes":
                inner = f"('bytes', {compact}, False, False)"
            else:
                raise SystemExit(f"unsupported array element {elem}")
            return f"('array', {compact}, {nullable}, {inner})"
        if f.struct is not None:
            return f"('struct', {self.accel_program(spec, f.struct, v)}, {nullable})"
        if f.type in FIXED:
            return f"({f.type!r},)"
        if f.type == "string":
            return f"('string', {compact}, {nullable})"
        if f.type == "bytes":
            maybe_none = not f.nullable.empty or f.default is None
            return f"('bytes', {compact}, {nullable}, {maybe_none})"
        if f.type == "records":
            return f"('records', {compact}, {nullable})"
        raise SystemExit(f"unsupported field type {f.type}")

    def accel_program(self, spec: SchemaSpec, st: StructSpec, v: int) -> str:
        """One struct at one version as data: (class, flexible, fields, has unknown tags).

        Each field is (attribute, "field", op), (attribute, "tagged", op, default
        kind, default, tag) or (attribute, "absent", default kind, default, checked).
        """
        key = ("p", st.cls, v)
        if key in self.memo:
            return self.memo[key]
        flex = v in spec.flexible
        items: list[str] = []
        for f in st.fields:
            if v not in f.versions:
                kind, value = self.accel_default(f)
                items.append(f"({f.attr!r}, 'absent', {kind!r}, {value}, {not f.ignorable})")
            elif v in f.tagged:
                if not flex:
                    raise SystemExit(f"{st.cls}.{f.attr}: tagged in a non-flexible version")
                kind, value = self.accel_default(f)
                op = self.accel_op(spec, f, v)
                items.append(f"({f.attr!r}, 'tagged', {op}, {kind!r}, {value}, {f.tag})")
            else:
                items.append(f"({f.attr!r}, 'field', {self.accel_op(spec, f, v)})")
        fields = "(" + "".join(i + ", " for i in items) + ")"
        text = f"({st.cls}, {flex}, {fields}, {self.has_unknown(spec, st)})"
        name = self.program_by_text.get(text)
        if name is None:
            name = f"p{len(self.programs)}"
            self.program_by_text[text] = name
            self.programs.append(f"    {name} = {text}")
        self.memo[key] = name
        return name

    def accel_text(self) -> str:
        tables = []
        for spec in self.schemas:
            rows = ", ".join(
                f"{v}: {self.accel_program(spec, spec.top, v)}"
                for v in range(spec.valid.low, spec.valid.high + 1)
            )
            tables.append(f"{spec.top.cls!r}: {{{rows}}}")
        return (
            "def _accel_programs() -> dict[str, dict[int, object]]:\n"
            '    """Layouts for the optional C accelerator (see wire/accel.py); the functions above\n'
            '    are the reference."""\n'
            + "\n".join(self.programs)
            + f"\n    return {{{', '.join(tables)}}}\n"
        )
