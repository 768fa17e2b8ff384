#!/usr/bin/env python3
"""Run the compatibility suite against each target and write docs/compatibility-matrix.md.

    python scripts/gen_compat_matrix.py                      # cormorant, then tansu
    python scripts/gen_compat_matrix.py --targets cormorant  # one target
    python scripts/gen_compat_matrix.py --from-json DIR      # re-render saved runs
    python scripts/gen_compat_matrix.py --json-dir DIR       # both, and keep the runs in DIR
    python scripts/gen_compat_matrix.py --targets cormorant --json-dir DIR
                                        # Cormorant again; the Tansu run saved in DIR is kept

Each target is one ``pytest compat_tests`` run with ``CORMORANT_COMPAT_TARGET`` set and
``CORMORANT_COMPAT_MATRIX_OUT`` pointing at a JSON file (compat_tests/harness/matrix.py
records every test's outcome there), so every cell of the page is a real run. The Spark
scenarios run when ``CORMORANT_SPARK_JARS`` is set and are reported as skipped otherwise.
The raw JSON files are kept in ``--json-dir`` (default: a temp dir) for re-rendering.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat_tests"
OUT = ROOT / "docs" / "compatibility-matrix.md"
TARGETS = ("cormorant", "tansu")
TARGET_TITLES = {"cormorant": "Cormorant", "tansu": "Tansu 0.6.0 (memory engine)"}
CLIENT_ORDER = (
    "kafka-python", "aiokafka", "confluent-kafka", "kcat", "kafkajs", "java", "java4", "spark",
    "several",
)
MARKS = {"pass": "pass", "fail": "FAIL", "xfail": "xfail", "skip": "skip", "partial": "pass*"}
NOTE_CHARS_MAX = 220


def _pkg(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _jar_version(folder: Path, prefix: str) -> str | None:
    jars = sorted(folder.glob(f"{prefix}*.jar")) if folder.is_dir() else []
    return jars[-1].name.removeprefix(prefix).removesuffix(".jar") if jars else None


def client_versions() -> dict[str, str]:
    found: dict[str, str] = {}
    for client, package in (("kafka-python", "kafka-python"), ("aiokafka", "aiokafka")):
        found[client] = _pkg(package) or "not installed"
    try:
        import confluent_kafka

        ck: object = confluent_kafka.version()
        rdk: object = confluent_kafka.libversion()
        client_text = ck[0] if isinstance(ck, tuple) else ck
        lib_text = rdk[0] if isinstance(rdk, tuple) else rdk
        found["confluent-kafka"] = f"{client_text} (librdkafka {lib_text})"
    except ImportError:
        found["confluent-kafka"] = "not installed"
    kcat = shutil.which("kcat")
    found["kcat"] = "not installed"
    if kcat:
        text = subprocess.run([kcat, "-V"], capture_output=True, text=True, check=False).stdout
        m = re.search(r"Version (\S+).*?librdkafka (\S+)", text, re.S)
        found["kcat"] = f"{m.group(1)} (librdkafka {m.group(2)})" if m else text.split("\n")[0]
    package_json = COMPAT / "node" / "node_modules" / "kafkajs" / "package.json"
    found["kafkajs"] = (
        json.loads(package_json.read_text())["version"] if package_json.is_file() else "not installed"
    )
    found["java"] = f"kafka-clients {_jar_version(COMPAT / 'java' / 'lib', 'kafka-clients-') or '?'}"
    found["java4"] = f"kafka-clients {_jar_version(COMPAT / 'java' / 'lib4', 'kafka-clients-') or '?'}"
    jars = Path(os.environ.get("CORMORANT_SPARK_JARS", "") or "/nonexistent")
    connector = _jar_version(jars, "spark-sql-kafka-0-10_2.13-")
    found["spark"] = (
        f"pyspark {_pkg('pyspark') or '?'}, spark-sql-kafka-0-10 {connector or '?'}, "
        f"kafka-clients {_jar_version(jars, 'kafka-clients-') or '?'}"
    )
    found["several"] = "the clients above"
    return found


def run_target(target: str, json_path: Path, pytest_args: list[str]) -> float:
    env = dict(os.environ)
    env["CORMORANT_COMPAT_TARGET"] = target
    env["CORMORANT_COMPAT_MATRIX_OUT"] = str(json_path)
    cmd = [sys.executable, "-m", "pytest", "compat_tests", "-q", "-p", "no:cacheprovider", *pytest_args]
    print(f"[gen_compat_matrix] {target}: {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    subprocess.run(cmd, cwd=str(ROOT), env=env, check=False)
    if not json_path.is_file():
        raise SystemExit(f"the {target} run wrote no {json_path}")
    return time.monotonic() - started


def _cell(outcomes: list[dict[str, Any]]) -> tuple[str, str]:
    """A cell's mark and notes from its variants' outcomes."""
    states = {o["outcome"] for o in outcomes}
    notes: list[str] = []

    def label(o: dict[str, Any]) -> str:
        return f"{o['variant']}: " if o["variant"] else ""

    bad = [o for o in outcomes if o["outcome"] in ("failed", "error")]
    if bad:
        mark = "fail"
        notes += [f"{label(o)}{o['outcome']}: {o['reason']}" for o in bad]
    elif "xfailed" in states or "xpassed" in states:
        mark = "xfail" if "xfailed" in states else "pass"
    elif states == {"skipped"}:
        mark = "skip"
    elif "skipped" in states:
        mark = "partial"
    else:
        mark = "pass"
    reasons: dict[str, list[str]] = defaultdict(list)
    for o in outcomes:
        if o["outcome"] in ("skipped", "xfailed", "xpassed"):
            kind = {"skipped": "skipped", "xfailed": "known broker quirk", "xpassed": "passed despite a known quirk"}[o["outcome"]]
            reasons[f"{kind}: {o['reason']}"].append(o["variant"])
    for reason, variants in reasons.items():
        which = ", ".join(v for v in variants if v)
        notes.append(f"{which}: {reason}" if which else reason)
    text = "; ".join(notes)
    if len(text) > NOTE_CHARS_MAX:
        text = text[: NOTE_CHARS_MAX - 1] + "…"
    return mark, text.replace("|", "\\|")


#: Client parameter values of the security tests, as the matrix names clients.
_CLIENT_NAMES = {"confluent": "confluent-kafka", "kafka_python": "kafka-python"}
#: Words of a security test's name and variant, and the feature each names.
SECURITY_WORDS = {"ssl": "SSL", "tls": "SSL", "mtls": "mTLS", "mutual": "mTLS", "plain": "PLAIN",
                  "scram": "SCRAM", "oauthbearer": "OAUTHBEARER"}
_FEATURE_ORDER = ("SSL", "mTLS", "PLAIN", "SCRAM", "OAUTHBEARER")


def _security_features(outcome: dict[str, Any]) -> set[str]:
    """The security features one outcome of the security tests exercises."""
    if not outcome["scenario"].startswith("security"):
        return set()
    words = re.split(r"[^a-z0-9]+", f"{outcome['scenario']} {outcome['variant']}".lower())
    return {SECURITY_WORDS[w] for w in (re.sub(r"\d+$", "", w) for w in words) if w in SECURITY_WORDS}


def _column(doc: dict[str, Any], features_of: Callable[[dict[str, Any]], set[str]],
            order: Sequence[str]) -> dict[str, str]:
    """Per client, the features (``features_of`` each outcome) one run exercised with it: those
    that passed, and those that failed (FAIL), in ``order``."""
    passed: dict[str, set[str]] = defaultdict(set)
    failed: dict[str, set[str]] = defaultdict(set)
    for o in doc["results"]:
        features = features_of(o)
        if not features:
            continue
        client = o["client"]
        if client == "several":  # the Java tests name their client in the variant
            match = re.search(r"variant=(java4?)\b", o["variant"])
            if match is None:
                continue
            client = match.group(1)
        client = _CLIENT_NAMES.get(client, client)
        if o["outcome"] in ("failed", "error"):
            failed[client] |= features
        elif o["outcome"] == "passed":
            passed[client] |= features
    column: dict[str, str] = {}
    for client in set(passed) | set(failed):
        good = [f for f in order if f in passed[client] and f not in failed[client]]
        bad = [f for f in order if f in failed[client]]
        column[client] = ", ".join(good + [f"{f} FAIL" for f in bad])
    return column


def security_column(doc: dict[str, Any]) -> dict[str, str]:
    """Per client, the security features the security tests of one run exercised with it:
    those that passed, and those that failed (FAIL) — the matrix's security column."""
    return _column(doc, _security_features, _FEATURE_ORDER)


#: Scenario prefixes of the ACL, tenant and quota tests (first match wins), and the feature each names.
AUTHORIZATION_SCENARIOS = (
    ("acls: create_list_delete_acls", "ACL admin"),
    ("acls: ", "ACLs"),
    ("acls_cluster: ", "ACLs"),
    ("acls_tenants: ", "prefixed ACLs"),
    ("client_quotas: ", "quota admin"),
    ("produce_quota: ", "quotas"),
    ("quota_rates: ", "quotas"),
    ("mutation_quota: ", "quotas"),
    ("quotas_cluster: ", "quotas"),
)
_AUTHORIZATION_ORDER = ("ACL admin", "ACLs", "prefixed ACLs", "quota admin", "quotas")


def _authorization_features(outcome: dict[str, Any]) -> set[str]:
    """The authorization feature one outcome of the ACL, tenant and quota tests exercises."""
    scenario = outcome["scenario"]
    return next(({feature} for prefix, feature in AUTHORIZATION_SCENARIOS if scenario.startswith(prefix)), set())


def authorization_column(doc: dict[str, Any]) -> dict[str, str]:
    """Per client, what the ACL, tenant and quota tests of one run exercised with it: those that
    passed, and those that failed (FAIL) — the matrix's authorization column."""
    return _column(doc, _authorization_features, _AUTHORIZATION_ORDER)


def _client_key(client: str) -> tuple[int, str]:
    return (CLIENT_ORDER.index(client) if client in CLIENT_ORDER else len(CLIENT_ORDER), client)


def render_target(doc: dict[str, Any], versions: dict[str, str], seconds: float | None) -> list[str]:
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for o in doc["results"]:
        cells[(o["client"], o["scenario"])].append(o)
    clients = sorted({c for c, _ in cells}, key=_client_key)
    scenarios = sorted({s for _, s in cells})
    marks = {key: _cell(outcomes) for key, outcomes in cells.items()}
    counts: dict[str, int] = defaultdict(int)
    for mark, _ in marks.values():
        counts[mark] += 1
    title = TARGET_TITLES.get(doc["target"], doc["target"])
    tests = len(doc["results"])
    summary = ", ".join(f"{counts[m]} {MARKS[m]}" for m in MARKS if counts[m])
    lines = [f"## {title}", ""]
    took = f" in {seconds / 60:.0f} min" if seconds else ""
    lines.append(
        f"{len(marks)} cells from {tests} test runs{took}: {summary}. Producer idempotence: "
        f"{doc.get('idempotence', 'off')}."
    )
    lines += ["", "| scenario | " + " | ".join(clients) + " |", "| --- |" + " --- |" * len(clients)]
    for scenario in scenarios:
        row = [MARKS[marks[(c, scenario)][0]] if (c, scenario) in marks else "—" for c in clients]
        lines.append(f"| {scenario} | " + " | ".join(row) + " |")
    lines += ["", "| client | client version | scenario | result | notes |", "| --- | --- | --- | --- | --- |"]
    for client in clients:
        for scenario in scenarios:
            if (client, scenario) in marks:
                mark, notes = marks[(client, scenario)]
                lines.append(
                    f"| {client} | {versions.get(client, '?')} | {scenario} | {MARKS[mark]} | {notes} |"
                )
    lines.append("")
    return lines


def render(docs: list[dict[str, Any]], versions: dict[str, str], seconds: dict[str, float]) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    lines = [
        "# Compatibility matrix",
        "",
        "<!-- Generated by scripts/gen_compat_matrix.py; do not edit by hand. -->",
        "",
        f"Generated {stamp} by `python scripts/gen_compat_matrix.py`: the compatibility suite "
        "(`compat_tests/`, see its README) run once per broker, every cell a real run of real "
        "clients against a broker process on 127.0.0.1. A cell is one client in one scenario; "
        "it sums up the scenario's variants (acks, codecs, ...).",
        "",
        "Results: **pass** every variant passed; **pass\\*** passed, some variants skipped "
        "(the client lacks the feature, see notes); **FAIL** a variant failed; **xfail** a "
        "known quirk of that broker (listed in `compat_tests/harness/quirks.py`); **skip** "
        "the client or feature is not available in that run. `several` are scenarios that "
        "drive several clients at once (restarts, kills); — means the scenario does not apply to "
        "that client. The Spark rows run Spark's own "
        "`format(\"kafka\")` connector through PySpark and need the connector jars "
        "(`CORMORANT_SPARK_JARS`).",
        "",
        "## Clients",
        "",
        "Security: what `compat_tests/test_security*.py` ran with the client against Cormorant and "
        "passed (SSL, mutual TLS, SASL PLAIN, SCRAM-SHA-256/512, OAUTHBEARER: produce, consume in a "
        "group, refusals); — means none of its security tests ran. Authorization: what the ACL, "
        "tenant and quota tests (`compat_tests/test_acls*.py`, `test_client_quotas.py`, "
        "`test_produce_quota.py`, `test_quota_rates.py`, `test_mutation_quota.py`, "
        "`test_quotas_cluster.py`) ran with it and passed (ACL admin: create, list, delete ACLs; "
        "ACLs: operations allowed and refused as Kafka, in one broker and a cluster; prefixed ACLs: "
        "tenants isolated; quota admin: set, describe, remove client quotas; quotas: throttled to "
        "the quota without errors).",
        "",
        "| client | version | security | authorization |",
        "| --- | --- | --- | --- |",
    ]
    present = sorted({o["client"] for d in docs for o in d["results"]}, key=_client_key)
    security = next((security_column(d) for d in docs if d["target"] == "cormorant"), {})
    authorization = next((authorization_column(d) for d in docs if d["target"] == "cormorant"), {})
    lines += [f"| {c} | {versions.get(c, '?')} | {security.get(c) or '—'} | {authorization.get(c) or '—'} |"
              for c in present]
    lines.append("")
    for doc in docs:
        lines += render_target(doc, versions, seconds.get(doc["target"]))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--json-dir", help="keep the raw results here (default: a temp dir)")
    parser.add_argument("--from-json", help="render the <target>.json files of this dir, run nothing")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    json_dir = Path(args.from_json or args.json_dir or tempfile.mkdtemp(prefix="compat-matrix-"))
    json_dir.mkdir(parents=True, exist_ok=True)
    seconds_file = json_dir / "seconds.json"
    seconds: dict[str, float] = json.loads(seconds_file.read_text()) if seconds_file.is_file() else {}
    if not args.from_json:
        for target in targets:
            seconds[target] = run_target(target, json_dir / f"{target}.json", args.pytest_args)
            seconds_file.write_text(json.dumps(seconds))
    # Runs of other targets saved in the same --json-dir are kept on the page: Cormorant can be
    # run again alone while the (slower, unchanging) Tansu run is reused.
    shown = [t for t in TARGETS if t in targets or (not args.from_json and (json_dir / f"{t}.json").is_file())]
    shown += [t for t in targets if t not in shown]
    docs = [json.loads((json_dir / f"{t}.json").read_text()) for t in shown]
    Path(args.out).write_text(render(docs, client_versions(), seconds), "utf-8")
    print(f"[gen_compat_matrix] wrote {args.out} (raw results in {json_dir})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
