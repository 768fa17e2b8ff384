"""Writes ``wire/generated/``: one module per API, record and data schema, and the registry."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from wiregen.merge import OLDER_APIS, newer_api_schemas
from wiregen.module_writer import BANNER, describe, module_name_for, render_module
from wiregen.schema import SchemaSpec, parse_schema, snake


def generate(schemas: Path, out: Path, newer: Path | None = None,
             older_apis: frozenset[int] = OLDER_APIS) -> None:
    messages = schemas / "messages"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "metadata").mkdir()
    (out / "coordinator").mkdir()
    (out / "data").mkdir()

    specs = [parse_schema(p) for p in sorted(messages.glob("*.json"))]
    by_key: dict[int, dict[str, SchemaSpec]] = {}
    others: list[SchemaSpec] = []
    for s in specs:
        if s.kind in ("request", "response"):
            assert s.api_key is not None
            by_key.setdefault(s.api_key, {})[s.kind] = s
        else:
            others.append(s)
    if newer is not None:
        for s in newer_api_schemas(newer, by_key, older_apis):
            assert s.api_key is not None
            by_key.setdefault(s.api_key, {})[s.kind] = s

    registry_imports: list[str] = []
    registry_rows: list[str] = []
    for key in sorted(by_key):
        pair = by_key[key]
        req, resp = pair["request"], pair["response"]
        mod = f"api_{key:03d}_{module_name_for(req)}"
        text = render_module([req, resp], [f"API key {key}.", describe(req), describe(resp)])
        (out / f"{mod}.py").write_text(text)
        registry_imports.append(f"from wire.generated.{mod} import {req.name}, {resp.name}")
        listeners = ", ".join(repr(x) for x in req.listeners)
        dep = "None" if req.deprecated.empty else f"({req.deprecated.low}, {min(req.deprecated.high, req.valid.high)})"
        registry_rows.append(
            f"    {key}: ApiSpec({key}, {req.name[:-len('Request')]!r}, {req.name}, {resp.name}, "
            f"{req.valid.low}, {req.valid.high}, "
            f"{req.flexible.low if not req.flexible.empty else -1}, ({listeners}{',' if len(req.listeners) == 1 else ''}), "
            f"{req.latest_unstable}, {dep}),"
        )

    data_names: list[tuple[str, str]] = []
    for s in others:
        if s.kind == "header":
            mod = "headers" if False else f"header_{snake(s.name)}"
            (out / f"{mod}.py").write_text(render_module([s], [describe(s)]))
            registry_imports.append(f"from wire.generated.{mod} import {s.name}")
        else:
            mod = snake(s.name)
            (out / "data" / f"{mod}.py").write_text(render_module([s], [describe(s)]))
            registry_imports.append(f"from wire.generated.data.{mod} import {s.name}")
            data_names.append((s.name, s.name))

    metadata_rows: list[str] = []
    for p in sorted((schemas / "metadata-records").glob("*.json")):
        s = parse_schema(p)
        assert s.api_key is not None
        mod = f"rec_{s.api_key:03d}_{snake(s.name)}"
        (out / "metadata" / f"{mod}.py").write_text(
            render_module([s], [f"Metadata record type {s.api_key}.", describe(s)])
        )
        registry_imports.append(f"from wire.generated.metadata.{mod} import {s.name}")
        metadata_rows.append(f"    {s.api_key}: {s.name},")

    coordinator_rows: list[str] = []
    for p in sorted((schemas / "coordinator-records").glob("*/*.json")):
        s = parse_schema(p)
        mod = snake(s.name)
        (out / "coordinator" / f"{mod}.py").write_text(
            render_module([s], [f"Coordinator record ({p.parent.name}).", describe(s)])
        )
        registry_imports.append(f"from wire.generated.coordinator.{mod} import {s.name}")
        coordinator_rows.append(f"    {s.name!r}: {s.name},")

    for sub in ("metadata", "coordinator", "data"):
        (out / sub / "__init__.py").write_text(BANNER)
    (out / "__init__.py").write_text(BANNER)

    registry = [
        BANNER,
        '"""Every generated message, by API key and by record type."""\n\n',
        "from __future__ import annotations\n\n",
        "from wire.primitives import ApiSpec, Message\n",
        *(line + "\n" for line in registry_imports),
        "\n#: Request/response pairs by API key.\n",
        "API_SPECS: dict[int, ApiSpec] = {\n",
        *(r + "\n" for r in registry_rows),
        "}\n\n",
        "#: KRaft metadata records by record type id.\n",
        "METADATA_RECORDS: dict[int, type[Message]] = {\n",
        *(r + "\n" for r in metadata_rows),
        "}\n\n",
        "#: Coordinator record keys and values by schema name.\n",
        "COORDINATOR_RECORDS: dict[str, type[Message]] = {\n",
        *(r + "\n" for r in coordinator_rows),
        "}\n",
    ]
    (out / "registry.py").write_text("".join(registry))
    # Formatting keeps the output stable and readable; ruff is a test dependency.
    ruff = shutil.which("ruff")
    if ruff:
        subprocess.run(
            [ruff, "format", "--quiet", "--line-length", "100", str(out)],
            check=True,
            cwd=tempfile.gettempdir(),
        )
