"""DescribeClientQuotas and AlterClientQuotas against a real broker process: quotas are
ClientQuotaRecords, validated as Kafka's ClientQuotaControlManager, kept across a restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.tools.client import KafkaClient
from tests.broker.broker_process import BrokerProcess
from wire.errors import ErrorCode
from wire.generated.api_048_describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasRequestComponentData,
    DescribeClientQuotasResponse,
)
from wire.generated.api_049_alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasRequestEntityData,
    AlterClientQuotasRequestEntryData,
    AlterClientQuotasRequestOpData,
    AlterClientQuotasResponse,
)

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def entry(entity: dict[str, str | None], **ops: float | None) -> AlterClientQuotasRequestEntryData:
    return AlterClientQuotasRequestEntryData(
        entity=[AlterClientQuotasRequestEntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[AlterClientQuotasRequestOpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])


def alter(c: KafkaClient, *entries: AlterClientQuotasRequestEntryData, validate_only: bool = False) -> list[int]:
    response = c.send(AlterClientQuotasRequest(entries=list(entries), validate_only=validate_only),
                      AlterClientQuotasResponse)
    return [e.error_code for e in response.entries]


def describe(c: KafkaClient, *components: tuple[str, int, str | None],
             strict: bool = False) -> DescribeClientQuotasResponse:
    return c.send(DescribeClientQuotasRequest(strict=strict, components=[
        DescribeClientQuotasRequestComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components]),
        DescribeClientQuotasResponse)


def described(response: DescribeClientQuotasResponse) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == 0 and response.entries is not None
    return {tuple((e.entity_type, e.entity_name) for e in x.entity): {v.key: v.value for v in x.values}
            for x in response.entries}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("quotas") / "data").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


def test_alter_describe_and_restart(broker: BrokerProcess) -> None:
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        assert alter(c, entry({"user": "alice"}, producer_byte_rate=1048576.0, request_percentage=50.5),
                     entry({"user": "alice", "client-id": "app"}, consumer_byte_rate=2048.0),
                     entry({"user": None}, producer_byte_rate=4096.0),
                     entry({"ip": "10.0.0.1"}, connection_creation_rate=5.0)) == [0, 0, 0, 0]
        assert alter(c, entry({"user": "bob"}, producer_byte_rate=1.0), validate_only=True) == [0]
        refused = alter(c, entry({}, producer_byte_rate=1.0), entry({"group": "g"}, producer_byte_rate=1.0),
                        entry({"ip": "10.0.0.1", "user": "x"}, connection_creation_rate=1.0),
                        entry({"ip": "not-an-ip"}, connection_creation_rate=1.0),
                        entry({"user": "x"}, producer_byte_rate=1.5), entry({"user": "x"}, unknown_rate=1.0),
                        entry({"user": "x"}, producer_byte_rate=-1.0))
        assert refused == [ErrorCode.INVALID_REQUEST] * 7
        everything = described(describe(c))
        assert everything == {
            (("user", "alice"),): {"producer_byte_rate": 1048576.0, "request_percentage": 50.5},
            (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 2048.0},
            (("user", None),): {"producer_byte_rate": 4096.0},
            (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
        }
        assert set(described(describe(c, ("user", EXACT, "alice"), strict=True))) == {(("user", "alice"),)}
        assert set(described(describe(c, ("user", DEFAULT, None)))) == {(("user", None),)}
        assert set(described(describe(c, ("user", SPECIFIED, None)))) == {
            (("user", "alice"),), (("client-id", "app"), ("user", "alice"))}
        assert describe(c, ("user", EXACT, None)).error_code == ErrorCode.INVALID_REQUEST
        assert describe(c, ("ip", SPECIFIED, None), ("user", SPECIFIED, None)).error_code == ErrorCode.INVALID_REQUEST
    broker.stop()
    broker.start()
    with KafkaClient.connect(broker.bootstrap, timeout_s=20) as c:
        assert len(described(describe(c))) == 4
        assert alter(c, entry({"user": "alice"}, producer_byte_rate=None, request_percentage=None)) == [0]
        assert (("user", "alice"),) not in described(describe(c))


def test_configs_tool(broker: BrokerProcess) -> None:
    import subprocess
    import sys

    from tests.shared import ROOT

    def configs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "broker", "configs", "--bootstrap-server", broker.bootstrap,
                               *args], cwd=ROOT, capture_output=True, text=True, timeout=60)

    done = configs("--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config",
                   "producer_byte_rate=1024,consumer_byte_rate=2048")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Completed updating config for user-principal 'carol'.\n"
    assert configs("--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "carol",
                   "--entity-default", "--add-config", "request_percentage=25").returncode == 0
    shown = configs("--describe", "--entity-type", "users", "--entity-name", "carol")
    assert shown.stdout == ("Quota configs for user-principal 'carol' are "
                            "consumer_byte_rate=2048.0,producer_byte_rate=1024.0\n"), shown.stdout
    both = configs("--describe", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "carol",
                   "--entity-default")
    assert "the default client-id" in both.stdout and "request_percentage=25.0" in both.stdout, both.stdout
    assert configs("--alter", "--entity-type", "users", "--entity-name", "carol", "--delete-config",
                   "producer_byte_rate").returncode == 0
    assert "producer_byte_rate" not in configs("--describe", "--entity-type", "users", "--entity-name",
                                               "carol").stdout
    bad = configs("--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config", "producer_byte_rate=1.5")
    assert bad.returncode == 1 and bad.stderr.startswith("cormorant configs: ") and "Long" in bad.stderr
