"""``cormorant acls`` (kafka-acls.sh's options) against a broker with the StandardAuthorizer."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.shared import ROOT


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acltool") / "data", {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"}).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


def acls(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", "acls", "--bootstrap-server", broker.bootstrap, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_add_list_remove(broker: BrokerProcess) -> None:
    added = acls(broker, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation",
                 "Describe", "--topic", "orders")
    assert added.returncode == 0, added.stderr
    assert ("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"
            " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) \n") in added.stdout
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders" in added.stdout

    producer = acls(broker, "--add", "--allow-principal", "User:bob", "--producer", "--topic", "tenant-b.",
                    "--resource-pattern-type", "prefixed", "--transactional-id", "bob-tx")
    assert producer.returncode == 0, producer.stderr
    consumer = acls(broker, "--add", "--allow-principal", "User:carol", "--consumer", "--topic", "orders",
                    "--group", "carol-group")
    assert consumer.returncode == 0, consumer.stderr
    denied = acls(broker, "--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9", "--cluster",
                  "--operation", "ClusterAction")
    assert denied.returncode == 0, denied.stderr

    listed = acls(broker, "--list")
    assert listed.returncode == 0, listed.stderr
    text = listed.stdout
    for line in [
        "(principal=User:bob, host=*, operation=CREATE, permissionType=ALLOW)",
        "(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)",
        "ResourcePattern(resourceType=TOPIC, name=tenant-b., patternType=PREFIXED)",
        "ResourcePattern(resourceType=TRANSACTIONAL_ID, name=bob-tx, patternType=PREFIXED)",  # the one pattern type
        "ResourcePattern(resourceType=GROUP, name=carol-group, patternType=LITERAL)",
        "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)",
        "(principal=User:mallory, host=10.0.0.9, operation=CLUSTER_ACTION, permissionType=DENY)",
    ]:
        assert line in text, text
    by_principal = acls(broker, "--list", "--principal", "User:carol")
    assert "User:alice" not in by_principal.stdout and "User:carol" in by_principal.stdout
    matching = acls(broker, "--list", "--topic", "tenant-b.orders", "--resource-pattern-type", "match")
    assert "name=tenant-b., patternType=PREFIXED" in matching.stdout and "name=orders" not in matching.stdout

    removed = acls(broker, "--remove", "--force", "--topic", "orders")
    assert removed.returncode == 0, removed.stderr
    after = acls(broker, "--list", "--topic", "orders")
    assert after.stdout.strip() == ""
    assert "tenant-b." in acls(broker, "--list").stdout


def test_refusals(broker: BrokerProcess) -> None:
    no_principal = acls(broker, "--add", "--topic", "t")
    assert no_principal.returncode == 1
    assert no_principal.stderr.startswith("cormorant acls: You must specify one of")
    bad_op = acls(broker, "--add", "--allow-principal", "User:x", "--topic", "t", "--operation", "Fly")
    assert bad_op.returncode == 1 and "Invalid operation: Fly" in bad_op.stderr
    bad_principal = acls(broker, "--add", "--allow-principal", "alice", "--topic", "t")
    assert bad_principal.returncode == 1 and "Could not parse principal" in bad_principal.stderr
