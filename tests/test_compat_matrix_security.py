"""The compatibility matrix's security column: what the security tests ran per client."""

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
