"""Emits the straight-line encode function of each struct at each version."""

from __future__ import annotations

from wiregen.emit_base import WriterState
from wiregen.schema import FIXED, FieldSpec, SchemaSpec, StructSpec


class EncodeEmitter(WriterState):
    # ---- encode

    def encode_fn(self, spec: SchemaSpec, st: StructSpec, v: int) -> str:
        key = ("e", st.cls, v)
        if key in self.memo:
            return self.memo[key]
        lines: list[str] = []
        flex = v in spec.flexible
        # Kafka refuses to drop a non-ignorable field holding a non-default value.
        for f in st.fields:
            if v not in f.versions and not f.ignorable and spec.valid.low <= v:
                test = self.is_default_test(f, f"o.{f.attr}")
                lines.append(f"    if not ({test}):")
                lines.append(f"        raise absent_field_error({st.cls!r}, {f.attr!r})")
        run: list[tuple[FieldSpec, str]] = []

        def flush_run() -> None:
            if not run:
                return
            codes = "".join(c for _, c in run)
            name = self.fmt(codes)
            vals = ", ".join(
                f"o.{f.attr}.bytes" if c == "16s" else f"o.{f.attr}" for f, c in run
            )
            lines.append(f"    w += {name}.pack({vals})")
            run.clear()

        regular = [f for f in st.fields if v in f.versions and v not in f.tagged]
        tagged = [f for f in st.fields if v in f.versions and v in f.tagged]
        for f in regular:
            if not f.is_array and f.type in FIXED:
                run.append((f, FIXED[f.type][0]))
                continue
            flush_run()
            lines.extend(self.encode_field(spec, f, v, "w", f"o.{f.attr}", "    "))
        flush_run()
        if flex:
            if tagged:
                lines.append("    tg: list[tuple[int, bytes]] = []")
                for f in sorted(tagged, key=lambda x: x.tag or 0):
                    test = self.is_default_test(f, f"o.{f.attr}")
                    lines.append(f"    if not ({test}):")
                    lines.append("        tw = bytearray()")
                    if not f.is_array and f.type in FIXED:
                        code = FIXED[f.type][0]
                        val = f"o.{f.attr}.bytes" if code == "16s" else f"o.{f.attr}"
                        lines.append(f"        tw += {self.fmt(code)}.pack({val})")
                    else:
                        lines.extend(self.encode_field(spec, f, v, "tw", f"o.{f.attr}", "        "))
                    lines.append(f"        tg.append(({f.tag}, bytes(tw)))")
                lines.append("    write_tagged_fields(w, tg, o.unknown_tagged_fields)")
            else:
                lines.append("    if o.unknown_tagged_fields:")
                lines.append("        write_tagged_fields(w, [], o.unknown_tagged_fields)")
                lines.append("    else:")
                lines.append("        w.append(0)")
        if not lines:
            lines.append("    pass")
        body = "\n".join(lines)
        text = f"def FN(o: {st.cls}, w: bytearray, rg: Regions) -> None:\n{body}\n"
        name = self.register(text, f"_e_{st.cls}_{v}")
        self.memo[key] = name
        return name

    def encode_field(
        self, spec: SchemaSpec, f: FieldSpec, v: int, w: str, expr: str, ind: str
    ) -> list[str]:
        compact = self.flexible(spec, f, v)
        nullable = v in f.nullable
        x = f"x_{f.attr}"
        out: list[str] = []
        maybe_none = not f.nullable.empty or f.default is None
        if f.is_array:
            if maybe_none and not nullable:
                out.append(f"{ind}if {expr} is None:")
                out.append(f"{ind}    raise ValueError({(f.name + ' is null but not nullable in this version')!r})")
            out.append(f"{ind}write_array_length({w}, {expr}, {compact})")
            inner = ind
            if maybe_none:
                out.append(f"{ind}if {expr} is not None:")
                inner = ind + "    "
            elem = f.elem
            if elem in FIXED and elem != "uuid":
                code = FIXED[elem][0]
                out.append(f"{inner}write_fixed_array({w}, {expr}, {code!r})")
            elif elem == "uuid":
                out.append(f"{inner}for {x} in {expr}:")
                out.append(f"{inner}    {w} += {x}.bytes")
            elif elem == "string":
                fn = self.string_writer(compact, nullable=False)
                out.append(f"{inner}for {x} in {expr}:")
                out.append(f"{inner}    {fn}({w}, {x})")
            elif elem == "bytes":
                out.append(f"{inner}for {x} in {expr}:")
                out.append(f"{inner}    write_bytes({w}, {x}, {compact})")
            elif f.struct is not None:
                fn = self.encode_fn(spec, f.struct, v)
                out.append(f"{inner}for {x} in {expr}:")
                out.append(f"{inner}    {fn}({x}, {w}, rg)")
            return out
        if f.struct is not None:
            fn = self.encode_fn(spec, f.struct, v)
            if nullable:
                out.append(f"{ind}if {expr} is None:")
                out.append(f"{ind}    {w}.append(0xFF)")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {w}.append(1)")
                out.append(f"{ind}    {fn}({expr}, {w}, rg)")
            else:
                if maybe_none:
                    out.append(f"{ind}if {expr} is None:")
                    out.append(f"{ind}    raise ValueError({(f.name + ' is null but not nullable in this version')!r})")
                out.append(f"{ind}{fn}({expr}, {w}, rg)")
            return out
        if f.type == "string":
            fn = self.string_writer(compact, nullable)
            if maybe_none and not nullable:
                out.append(f"{ind}if {expr} is None:")
                out.append(f"{ind}    raise ValueError({(f.name + ' is null but not nullable in this version')!r})")
            out.append(f"{ind}{fn}({w}, {expr})")
        elif f.type == "bytes":
            if maybe_none and not nullable:
                out.append(f"{ind}if {expr} is None:")
                out.append(f"{ind}    raise ValueError({(f.name + ' is null but not nullable in this version')!r})")
            out.append(f"{ind}write_bytes({w}, {expr}, {compact})")
        elif f.type == "records":
            out.append(f"{ind}write_records({w}, {expr}, {compact}, rg)")
        return out
