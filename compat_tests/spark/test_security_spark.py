"""Spark's Kafka connector over secured listeners: ``kafka.security.protocol``, ``kafka.ssl.*``
and ``kafka.sasl.*`` options, unchanged from what a secured Kafka cluster needs.

One broker serves SSL, mutual TLS (``ssl.client.auth=required``), SASL_SSL and SASL_PLAINTEXT
listeners (certificates from ``cormorant tls init``, SCRAM credentials from ``serve
--add-scram``, PLAIN users from Kafka's JAAS string, OAUTHBEARER with Kafka's unsecured
login and validator). For each, Spark's sink writes rows and
Spark's source reads them back, in a batch query and in an ``availableNow`` streaming query
with a checkpoint; every row is compared. Wrong SCRAM credentials make the query fail with
Kafka's authentication error, and the same session is served on with the right ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from compat_tests.harness import settings
from compat_tests.harness.broker import Broker, CormorantBroker, make_broker
from compat_tests.harness.secured import ClientSecurity, tls_init, unique

from . import sparkenv

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.skipif(settings.target() != "cormorant", reason="secured listeners of cormorant")

MATRIX_CLIENT = "spark"
PARTITIONS = 2
QUERY_TIMEOUT_S = 120
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tls_init(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path, spark_jars: list[str]) -> Iterator[Broker]:
    broker = make_broker(tmp_path_factory.mktemp("spark-secured"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,OAUTH://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,OAUTH:SASL_SSL",
        "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oauth.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE};",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.pem"),
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "50",
    })
    assert isinstance(broker, CormorantBroker)
    broker.serve_args = ("--add-scram", "SCRAM-SHA-256=[name=spark,password=spark-secret]",
                         "--add-scram", "SCRAM-SHA-512=[name=spark,password=spark-secret]")
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


#: kind: (listener, the client's security from the CA and the certificates' folder)
KINDS: dict[str, tuple[str, Callable[[Path, Path], ClientSecurity]]] = {
    "ssl": ("SSL", lambda ca, c: ClientSecurity("SSL", ca=ca)),
    "mtls": ("MTLS", lambda ca, c: ClientSecurity("SSL", ca=ca, cert=c / "client.pem", key=c / "client-key.pem")),
    "sasl_ssl_scram512": ("SASL_SSL", lambda ca, c: ClientSecurity(
        "SASL_SSL", ca=ca, mechanism="SCRAM-SHA-512", user="spark", password="spark-secret")),
    "sasl_ssl_plain": ("SASL_SSL", lambda ca, c: ClientSecurity(
        "SASL_SSL", ca=ca, mechanism="PLAIN", user="alice", password="alice-secret")),
    "sasl_plaintext_scram256": ("SASL_PLAINTEXT", lambda ca, c: ClientSecurity(
        "SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", user="spark", password="spark-secret")),
}


def _connection(broker: Broker, certs: Path, kind: str) -> tuple[str, dict[str, str]]:
    """The listener's address and the ``kafka.*`` options a Spark user sets for it."""
    if kind == "sasl_ssl_oauthbearer":
        # Kafka's unsecured OAUTHBEARER login (an unsigned token from the JAAS options);
        # Spark's own class path has the jackson it needs.
        listener = "OAUTH"
        settings_ = {**ClientSecurity("SASL_SSL", ca=certs / "ca.pem").java(), "sasl.mechanism": "OAUTHBEARER",
                     "sasl.jaas.config": f'{OAUTH_MODULE} unsecuredLoginStringClaim_sub="spark";'}
    else:
        listener, make = KINDS[kind]
        settings_ = make(certs / "ca.pem", certs).java()
    options = {f"kafka.{key}": value for key, value in settings_.items()}
    return f"127.0.0.1:{broker.listener_port(listener)}", options  # type: ignore[attr-defined]


def _rows(df: Any) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = [(r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]))
           for r in df.select("partition", "offset", "key", "value").collect()]
    return sorted(out)


@pytest.mark.parametrize("kind", [*KINDS, "sasl_ssl_oauthbearer"])
def test_spark_sink_and_source_over_secured_listener(spark: SparkSession, secured: Broker, certs: Path,
                                                     tmp_path: Path, kind: str) -> None:
    bootstrap, security = _connection(secured, certs, kind)
    topic = unique(f"spark-sec-{kind}")
    secured.create_topic(topic, partitions=PARTITIONS)
    data = [(f"k{i}".encode(), f"{kind}-{i}".encode(), i % PARTITIONS) for i in range(8)]
    (spark.createDataFrame(data, "key binary, value binary, partition int").coalesce(1)
     .write.format("kafka").options(**sparkenv.write_options(bootstrap, security))
     .option("topic", topic).save())
    expected = sorted((p, i // PARTITIONS, k, v) for i, (k, v, p) in enumerate(data))

    batch = (spark.read.format("kafka").options(**sparkenv.read_options(bootstrap, security))
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("endingOffsets", "latest").load())
    assert _rows(batch) == expected

    collected: list[tuple[int, int, bytes | None, bytes | None]] = []
    stream = (spark.readStream.format("kafka").options(**sparkenv.read_options(bootstrap, security))
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
    checkpoint = tmp_path / "checkpoint"
    query = (stream.writeStream.foreachBatch(lambda df, _batch_id: collected.extend(_rows(df)))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), f"availableNow query still running after {QUERY_TIMEOUT_S} s"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    assert sorted(collected) == expected
    assert sparkenv.checkpoint_offsets(checkpoint) == {topic: {0: 4, 1: 4}}


def test_spark_with_wrong_scram_password_is_refused(spark: SparkSession, secured: Broker, certs: Path) -> None:
    bootstrap, security = _connection(secured, certs, "sasl_ssl_scram512")
    topic = unique("spark-sec-refused")
    secured.create_topic(topic, partitions=1)
    wrong = {**security, "kafka.sasl.jaas.config": security["kafka.sasl.jaas.config"].replace(
        'password="spark-secret"', 'password="not-the-password"')}
    assert wrong != security
    with pytest.raises(Exception) as refused:
        (spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
         .write.format("kafka").options(**sparkenv.write_options(bootstrap, wrong))
         .option("topic", topic).save())
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in str(refused.value), str(refused.value)[-2000:]
    # Nothing was written, and the right password is served on the same listener.
    reader = (spark.read.format("kafka").options(**sparkenv.read_options(bootstrap, security))
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest"))
    assert _rows(reader.load()) == []
