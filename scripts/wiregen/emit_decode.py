"""Emits the straight-line decode function of each struct at each version."""

from __future__ import annotations

from wiregen.emit_base import WriterState
from wiregen.schema import FIXED, FieldSpec, SchemaSpec, StructSpec


class DecodeEmitter(WriterState):
    # ---- decode

    def decode_fn(self, spec: SchemaSpec, st: StructSpec, v: int) -> str:
        key = ("d", st.cls, v)
        if key in self.memo:
            return self.memo[key]
        lines: list[str] = []
        flex = v in spec.flexible
        run: list[tuple[FieldSpec, str, int]] = []

        def flush_run() -> None:
            if not run:
                return
            codes = "".join(c for _, c, _ in run)
            size = sum(n for _, _, n in run)
            name = self.fmt(codes)
            targets = ", ".join(f"f_{f.attr}" for f, _, _ in run)
            lines.append(f"    if p + {size} > e:")
            lines.append(f"        raise short(p, {size})")
            lines.append(f"    {targets}{',' if len(run) == 1 else ''} = {name}.unpack_from(b, p)")
            lines.append(f"    p += {size}")
            for f, c, _ in run:
                if c == "16s":
                    lines.append(f"    f_{f.attr} = uuid_from(f_{f.attr})")
            run.clear()

        regular = [f for f in st.fields if v in f.versions and v not in f.tagged]
        tagged = [f for f in st.fields if v in f.versions and v in f.tagged]
        for f in regular:
            if not f.is_array and f.type in FIXED:
                code, size = FIXED[f.type]
                if code == "16s":
                    self.uses_uuid = True
                run.append((f, code, size))
                continue
            flush_run()
            lines.extend(self.decode_field(spec, f, v, "e", "    "))
        flush_run()
        if flex:
            if tagged:
                for f in tagged:
                    lines.append(f"    f_{f.attr}: {self.annotation(f)} = {self.default_expr(f)}")
                lines.append("    u: UnknownTags | None = None")
                lines.append("    if p < e and b[p] == 0:")
                lines.append("        nt = 0")
                lines.append("        p += 1")
                lines.append("    else:")
                lines.append("        nt, p = read_tag_count(b, p, e, lim)")
                lines.append("    for _ in range(nt):")
                lines.append("        t, q, p = read_tag_header(b, p, e)")
                for i, f in enumerate(sorted(tagged, key=lambda x: x.tag or 0)):
                    kw = "if" if i == 0 else "elif"
                    lines.append(f"        {kw} t == {f.tag}:")
                    if f.type == "uuid":
                        lines.append(f"            f_{f.attr}, p = read_uuid(b, p, q)")
                    elif not f.is_array and f.type in FIXED:
                        code, size = FIXED[f.type]
                        name = self.fmt(code)
                        lines.append(f"            if p + {size} > q:")
                        lines.append(f"                raise short(p, {size})")
                        lines.append(f"            f_{f.attr}, = {name}.unpack_from(b, p)")
                        lines.append(f"            p += {size}")
                    else:
                        lines.extend(self.decode_field(spec, f, v, "q", "            ", annotate=False))
                    lines.append(f"            check_end(p, q, {f.name!r})")
                lines.append("        else:")
                lines.append("            u = read_unknown_tag(b, p, q, u, t)")
                lines.append("        p = q")
            else:
                lines.append("    if p < e and b[p] == 0:")
                lines.append("        u: UnknownTags | None = None")
                lines.append("        p += 1")
                lines.append("    else:")
                lines.append("        u, p = skip_tagged_fields(b, p, e, lim)")
        args = []
        for f in st.fields:
            if v in f.versions:
                args.append(f"f_{f.attr}")
            else:
                args.append(self.default_expr(f))
        if self.has_unknown(spec, st):
            args.append("u" if flex else "None")
        body = "\n".join(lines)
        ctor = f"{st.cls}({', '.join(args)})"
        text = (
            f"def FN(b: memoryview, p: int, e: int, lim: DecodeLimits) -> tuple[{st.cls}, int]:\n"
            f"{body}\n    return {ctor}, p\n"
        )
        name = self.register(text, f"_d_{st.cls}_{v}")
        self.memo[key] = name
        return name

    def decode_field(
        self, spec: SchemaSpec, f: FieldSpec, v: int, end: str, ind: str, annotate: bool = True
    ) -> list[str]:
        compact = self.flexible(spec, f, v)
        nullable = v in f.nullable
        t = f"f_{f.attr}"
        x = f"x_{f.attr}"
        out: list[str] = []
        if annotate and (f.is_array or f.struct is not None):
            out.append(f"{ind}{t}: {self.annotation(f)}")
        if f.is_array:
            if compact:
                # Fast path: a one-byte length of a non-null array (still under the array limit,
                # which callers lower below 127 to bound what they decode on the event loop).
                out.append(f"{ind}if p < {end} and 0 < b[p] < 0x80 and b[p] <= {end} - p"
                           f" and b[p] <= lim.max_array_length:")
                out.append(f"{ind}    n = b[p] - 1")
                out.append(f"{ind}    p += 1")
                out.append(f"{ind}else:")
                out.append(
                    f"{ind}    n, p = read_array_length(b, p, {end}, {compact}, {nullable}, lim)"
                )
            else:
                out.append(
                    f"{ind}n, p = read_array_length(b, p, {end}, {compact}, {nullable}, lim)"
                )
            inner = ind
            if nullable:
                out.append(f"{ind}if n < 0:")
                out.append(f"{ind}    {t} = None")
                out.append(f"{ind}else:")
                inner = ind + "    "
            elem = f.elem
            if elem in FIXED and elem != "uuid" and elem != "bool":
                code, size = FIXED[elem]
                out.append(f"{inner}if n < SMALL_ARRAY and p + n * {size} <= {end}:")
                out.append(f"{inner}    {t} = list(FIXED_ARRAYS[{code!r}][n].unpack_from(b, p))")
                out.append(f"{inner}    p += n * {size}")
                out.append(f"{inner}else:")
                out.append(f"{inner}    {t}, p = read_fixed_array(b, p, {end}, n, {code!r}, {size})")
            elif elem == "uuid":
                self.uses_uuid = True
                out.append(f"{inner}{t}, p = read_uuid_array(b, p, {end}, n)")
            elif elem == "bool":
                out.append(f"{inner}{t}, p = read_fixed_array(b, p, {end}, n, '?', 1)")
            else:
                out.append(f"{inner}{t} = []")
                out.append(f"{inner}for _ in range(n):")
                if elem == "string":
                    fn = self.string_reader(compact, nullable=False)
                    out.append(f"{inner}    {x}, p = {fn}(b, p, {end})")
                elif elem == "bytes":
                    out.append(f"{inner}    {x}, p = read_bytes_nn(b, p, {end}, {compact}, lim)")
                elif f.struct is not None:
                    fn = self.decode_fn(spec, f.struct, v)
                    out.append(f"{inner}    {x}, p = {fn}(b, p, {end}, lim)")
                else:
                    raise SystemExit(f"unsupported array element {elem}")
                out.append(f"{inner}    {t}.append({x})")
            return out
        if f.struct is not None:
            fn = self.decode_fn(spec, f.struct, v)
            if nullable:
                out.append(f"{ind}if p >= {end}:")
                out.append(f"{ind}    raise short(p, 1)")
                out.append(f"{ind}if b[p] >= 0x80:")
                out.append(f"{ind}    {t} = None")
                out.append(f"{ind}    p += 1")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {t}, p = {fn}(b, p + 1, {end}, lim)")
            else:
                out.append(f"{ind}{t}, p = {fn}(b, p, {end}, lim)")
            return out
        if f.type == "string":
            out.append(f"{ind}{t}, p = {self.string_reader(compact, nullable)}(b, p, {end})")
        elif f.type == "bytes":
            if nullable:
                out.append(f"{ind}{t}, p = read_bytes(b, p, {end}, {compact}, True, lim)")
            else:
                out.append(f"{ind}{t}, p = read_bytes_nn(b, p, {end}, {compact}, lim)")
        elif f.type == "records":
            self.uses_regions = True
            out.append(f"{ind}{t}, p = read_records(b, p, {end}, {compact}, {nullable}, lim)")
        else:
            raise SystemExit(f"unsupported field type {f.type}")
        return out
