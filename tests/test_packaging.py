"""A fresh virtualenv with ``pip install -e '.[test]'`` holds everything the tests import.

Every module imported by ``tests/`` and ``compat_tests/`` is from the standard library, from
this project, or from a distribution named in ``pyproject.toml`` (runtime dependencies, the
``test`` extra, or the ``spark`` extra for the Spark tests). So are the modules the clients
under test load for themselves when a test uses a feature: kafka-python compresses snappy
only with ``snappy`` (python-snappy) importable, and the compat suite produces snappy with it.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.shared import ROOT

OWN_PACKAGES = {"broker", "wire", "config", "controller", "tests", "compat_tests"}
#: Modules that a client imports for a feature the tests use (client -> module).
CLIENT_OPTIONAL_MODULES = {"kafka-python": "snappy"}
#: Where a module's distribution cannot be looked up because it is not installed here.
KNOWN_DISTRIBUTIONS = {"snappy": "python-snappy", "pyspark": "pyspark"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return _canonical(match.group(0))


def declared_distributions() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_requirement_name(r) for r in project["dependencies"]}
    for extra in ("test", "spark"):
        names |= {_requirement_name(r) for r in project["optional-dependencies"][extra]}
    return names


def imported_modules() -> dict[str, str]:
    """Top-level module -> a file importing it."""
    found: dict[str, str] = {}
    for folder in ("tests", "compat_tests"):
        for path in (ROOT / folder).rglob("*.py"):
            if "node_modules" in path.parts:
                continue
            tree = ast.parse(path.read_text("utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_package_a_test_imports_is_in_the_extras() -> None:
    installed = packages_distributions()
    declared = declared_distributions()
    modules = imported_modules()
    for client, module in CLIENT_OPTIONAL_MODULES.items():
        modules.setdefault(module, f"{client} (its optional codec)")
    missing = []
    for module, where in sorted(modules.items()):
        if module in sys.stdlib_module_names or module in OWN_PACKAGES or module == "__future__":
            continue
        if (ROOT / "scripts" / f"{module}.py").exists():  # the benchmarks' modules, put on sys.path by their tests
            continue
        dists = {_canonical(d) for d in installed.get(module, ())}
        if module in KNOWN_DISTRIBUTIONS:
            dists.add(_canonical(KNOWN_DISTRIBUTIONS[module]))
        assert dists, f"{module} (imported by {where}) is not installed: which distribution is it?"
        if not dists & declared:
            missing.append(f"{module} (imported by {where}; from {', '.join(sorted(dists))})")
    assert not missing, "not in pyproject.toml's dependencies or extras: " + "; ".join(missing)
