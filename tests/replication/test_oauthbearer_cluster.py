"""Brokers authenticate to each other and to the controllers with SASL/OAUTHBEARER.

A three-node cluster whose INTERNAL (inter-broker) and CONTROLLER listeners are SASL_PLAINTEXT
with OAUTHBEARER and the brokers' unsecured validator: on INTERNAL each broker logs in with
Kafka's unsecured login (``unsecuredLoginStringClaim_sub="broker"``), on CONTROLLER with a
token read from ``sasl.oauthbearer.token.endpoint.url`` (a ``file:`` URL). An RF=3 topic with
min.insync.replicas=2 takes acks=all writes only while followers fetch over INTERNAL; the
INTERNAL tokens live a few seconds, so the leaders end the followers' sessions and the
followers connect again with fresh tokens, and replication goes on.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.security.oauthbearer_login import unsecured_token
from tests.integration.quorum_cluster import Node, QuorumCluster, free_ports
from tests.replication.test_replication_cluster import (
    consume_all,
    create_replicated_topic,
    partition_state,
    produce,
    segment_bytes,
)
from tests.replication.test_secured_cluster import SecuredNode

pytestmark = pytest.mark.timeout(120)

#: The INTERNAL tokens' lifetime: the leaders end the followers' sessions when it runs out (KIP-368).
TOKEN_LIFETIME_S = 4
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"


def test_replication_and_controller_traffic_over_oauthbearer(tmp_path: Path) -> None:
    token_file = tmp_path / "controller-token.jws"
    token_file.write_text(unsecured_token({"unsecuredLoginStringClaim_sub": "broker-from-file"}, time.time()))
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        "sasl.mechanism.controller.protocol": "OAUTHBEARER",
        "listener.name.internal.oauthbearer.sasl.jaas.config": (
            f'{LOGIN_MODULE} unsecuredLoginStringClaim_sub="broker" unsecuredLoginLifetimeSeconds="{TOKEN_LIFETIME_S}";'),
        "listener.name.controller.oauthbearer.sasl.jaas.config": f"{LOGIN_MODULE};",
        "listener.name.controller.sasl.oauthbearer.token.endpoint.url": token_file.as_uri(),
        "controller.quorum.secret": "quorum-secret-for-tests",
        "replica.lag.time.max.ms": "5000",
    }
    cluster = QuorumCluster(tmp_path, overrides=overrides)
    # Not one of the ports the cluster chose (free until its nodes bind them).
    taken = {port for n in cluster.nodes.values() for port in (n.port, n.controller_port) if port}
    for node, port in zip(cluster.nodes.values(), free_ports(len(cluster.nodes), avoid=taken), strict=True):
        node.__class__ = SecuredNode
        assert isinstance(node, SecuredNode)
        node.internal_port = port
    with cluster:
        create_replicated_topic(cluster, min_isr=2)
        cluster.wait_value(lambda: partition_state(cluster), lambda p: len(p["isr"]) == 3, 30,
                           "topic with three in-sync replicas")
        bootstrap = [n.bootstrap for n in cluster.nodes.values()]
        values = [f"oauthbearer-{i}".encode() for i in range(20)]
        produce(bootstrap, values)
        assert consume_all(bootstrap, len(values)) == values

        def identical() -> bool:
            logs = {n.node_id: segment_bytes(n) for n in cluster.nodes.values()}
            return len(set(logs.values())) == 1 and len(logs[1]) > 0

        cluster.wait_for(identical, 20, "identical logs on every replica (followers fetched over INTERNAL)")
        by_listener: dict[str, set[str]] = {}
        for node in cluster.nodes.values():
            for event in node.events("sasl_authenticated"):
                by_listener.setdefault(str(event.get("listener")), set()).add(str(event["principal"]))
        assert by_listener.get("INTERNAL") == {"User:broker"}
        assert by_listener.get("CONTROLLER") == {"User:broker-from-file"}

        # The leader ends each follower session when its token expires; the followers log in again.
        leader = cluster.nodes[partition_state(cluster)["leader"]]
        before = len(internal_logins(leader))
        cluster.wait_for(lambda: len(internal_logins(leader)) >= before + 2, 6 * TOKEN_LIFETIME_S,
                         "followers authenticated again with fresh tokens")
        more = [f"after-expiry-{i}".encode() for i in range(10)]
        produce(bootstrap, more)
        assert consume_all(bootstrap, len(values) + len(more)) == values + more
        cluster.wait_for(identical, 20, "identical logs after the followers' new sessions")


def internal_logins(node: Node) -> list[dict[str, object]]:
    return [e for e in node.events("sasl_authenticated") if e.get("listener") == "INTERNAL"]
