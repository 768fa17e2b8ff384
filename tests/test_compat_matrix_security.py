"""The compatibility matrix's security and authorization columns: what the security tests, and the
ACL, tenant and quota tests, ran per client."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gen_compat_matrix.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_compat_matrix", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _outcome(client: str, scenario: str, variant: str, outcome: str = "passed") -> dict[str, Any]:
    return {"client": client, "scenario": scenario, "variant": variant, "nodeid": "", "outcome": outcome,
            "reason": ""}


def test_security_column_per_client() -> None:
    gen = _script()
    doc = {"target": "cormorant", "results": [
        _outcome("confluent", "security: produce_consume_group", "kind=sasl_ssl_scram512"),
        _outcome("confluent", "security: produce_consume_group", "kind=mtls"),
        _outcome("kafka_python", "security: produce_consume_group", "kind=sasl_plaintext_plain"),
        _outcome("kafka_python", "security: produce_consume_group", "kind=sasl_plaintext_scram256", "failed"),
        _outcome("several", "security: java_produce_consume_group", "kind=ssl, variant=java4"),
        _outcome("kafkajs", "security_clients: produce_consume_group", "kind=ssl", "skipped"),
        _outcome("confluent", "produce_consume: roundtrip", "acks=all"),
    ]}
    column = gen.security_column(doc)
    assert column == {
        "confluent-kafka": "SSL, mTLS, SCRAM",
        "kafka-python": "PLAIN, SCRAM FAIL",
        "java4": "SSL",
    }
    page = gen.render([doc], {"confluent-kafka": "2.x"}, {})
    assert "| client | version | security |" in page


def test_authorization_column_per_client(tmp_path: Path, monkeypatch: Any) -> None:
    """``--from-json DIR`` renders the column from a saved Cormorant run."""
    import json

    gen = _script()
    doc = {"target": "cormorant", "results": [
        _outcome("confluent-kafka", "acls: create_list_delete_acls", ""),
        _outcome("confluent-kafka", "acls: produce_and_consume_refused_where_denied", ""),
        _outcome("confluent-kafka", "acls_tenants: confluent_tenant_uses_its_prefix_and_is_refused_the_other",
                 "tenant=tenant-a"),
        _outcome("confluent-kafka", "quota_rates: one_mib_per_second_produce_and_consume", "", "failed"),
        _outcome("confluent-kafka", "security: produce_consume_group", "kind=mtls"),
        _outcome("kafka-python", "acls: create_list_delete_acls", "", "error"),
        _outcome("kafka-python", "acls: group_consume_and_commit_where_allowed_only", ""),
        _outcome("java4", "client_quotas: set_describe_remove_quotas", ""),
        _outcome("java4", "produce_quota: java_producer_is_slowed_to_the_quota", ""),
        _outcome("several", "acls_tenants: java_tenants_are_isolated", "variant=java"),
        _outcome("kafkajs", "acls: create_list_delete_acls", "", "skipped"),
        _outcome("kcat", "produce_consume: roundtrip", ""),
        _outcome("several", "quotas_cluster: connections_over_the_per_ip_limit_are_refused_and_the_rest_served", ""),
    ]}
    assert gen.authorization_column(doc) == {
        "confluent-kafka": "ACL admin, ACLs, prefixed ACLs, quotas FAIL",
        "kafka-python": "ACLs, ACL admin FAIL",
        "java4": "quota admin, quotas",
        "java": "prefixed ACLs",
    }
    (tmp_path / "cormorant.json").write_text(json.dumps(doc))
    monkeypatch.setattr(gen, "client_versions", lambda: {"confluent-kafka": "2.x"})
    out = tmp_path / "matrix.md"
    assert gen.main(["--targets", "cormorant", "--from-json", str(tmp_path), "--out", str(out)]) == 0
    page = out.read_text()
    assert "| client | version | security | authorization |" in page
    assert "| confluent-kafka | 2.x | mTLS | ACL admin, ACLs, prefixed ACLs, quotas FAIL |" in page
    assert "| kafkajs | ? | — | — |" in page
    assert "| kcat | ? | — | — |" in page


def test_a_saved_run_of_the_other_target_is_kept(tmp_path: Path, monkeypatch: Any) -> None:
    """``--targets cormorant --json-dir DIR`` runs Cormorant again and keeps DIR's Tansu run."""
    import json

    gen = _script()
    (tmp_path / "tansu.json").write_text(json.dumps({"target": "tansu", "results": [
        _outcome("kcat", "produce_consume: roundtrip", "")]}))
    ran: list[str] = []

    def fake_run(target: str, json_path: Path, _args: list[str]) -> float:
        ran.append(target)
        json_path.write_text(json.dumps({"target": target, "results": [
            _outcome("java4", "security: oauthbearer_java_unsecured", "listener=SASL_SSL")]}))
        return 60.0

    monkeypatch.setattr(gen, "run_target", fake_run)
    monkeypatch.setattr(gen, "client_versions", lambda: {})
    out = tmp_path / "matrix.md"
    assert gen.main(["--targets", "cormorant", "--json-dir", str(tmp_path), "--out", str(out)]) == 0
    page = out.read_text()
    assert ran == ["cormorant"]
    assert "## Cormorant" in page and "## Tansu" in page
    assert page.index("## Cormorant") < page.index("## Tansu")
    assert "| java4 | ? | SSL, OAUTHBEARER | — |" in page
