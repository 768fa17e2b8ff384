"""Requests that decode but mean nonsense, against a real broker: every API's requests (the
real clients' captured ones, and each API's defaults at each version) with fields mutated
by a seeded generator — extreme integers, illegal names, emptied and repeated lists,
damaged record batches — then encoded and sent.

Two brokers get them: one without an authorizer, one with ACLs. A broker answers each with Kafka's error codes or closes the connection: it never fails a
handler (``request_failed``, UNKNOWN_SERVER_ERROR), never logs a traceback, never holds
the loop past the stall guard (which would stop it), and serves a real client afterwards."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterator

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.broker.fuzzing import CLIENT_IDS, UNENCODABLE, Mutator, assert_unharmed, base_requests
from tests.broker.raw_client import RawClient
from wire.frame import encode_request
from wire.generated.api_019_create_topics import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsRequestCreatableTopicConfig,
    CreateTopicsResponse,
)

pytestmark = pytest.mark.timeout(600)

#: Requests sent per seed; each seed starts from the broker the earlier ones left.
REQUESTS_PER_SEED = 400
SEEDS = (1, 2, 3)
#: A request answered later than this (a Fetch told to wait, a join waiting for its group)
#: is left behind: the connection is closed and a new one opened.
ANSWER_TIMEOUT_S = 1.5


#: Each broker the requests go to: without an authorizer, and with ACLs (every request is
#: authorized; the mutated CreateAcls and DeleteAcls change what later requests may do).
BROKERS = {
    "plain": {"auto.create.topics.enable": "true"},
    "acls": {"auto.create.topics.enable": "true",
             "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "allow.everyone.if.no.acl.found": "true"},
}


@pytest.fixture(scope="module", params=sorted(BROKERS))
def broker(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("fuzz") / "data", BROKERS[request.param]).start()
    try:
        client = RawClient(b.bootstrap)
        compact = [CreateTopicsRequestCreatableTopicConfig(name="cleanup.policy", value="compact")]
        topics = [CreateTopicsRequestCreatableTopic(name="fuzz", num_partitions=3, replication_factor=1),
                  CreateTopicsRequestCreatableTopic(name="fuzz-compact", num_partitions=1, replication_factor=1,
                                                    configs=compact)]
        created = client.call(CreateTopicsRequest(topics=topics, timeout_ms=10_000), CreateTopicsResponse, 5)
        assert isinstance(created, CreateTopicsResponse)
        assert [t.error_code for t in created.topics] == [0, 0]
        client.close()
        yield b
    finally:
        b.stop()


def send_all(broker: BrokerProcess, seed: int) -> dict[str, int]:
    """Sends REQUESTS_PER_SEED mutated requests; how many were answered, closed, left."""
    rng = random.Random(seed)
    mutate = Mutator(rng)
    bases = base_requests()
    counts = {"answered": 0, "closed": 0, "left": 0, "unencodable": 0}
    sock: socket.socket | None = None
    try:
        for correlation_id in range(1, REQUESTS_PER_SEED + 1):
            version, body = rng.choice(bases)
            request = mutate.message(body)
            if rng.random() < 0.3:
                request = mutate.message(request)
            try:
                frame = encode_request(request, version, correlation_id, rng.choice(CLIENT_IDS))
            except UNENCODABLE:
                counts["unencodable"] += 1
                continue
            assert broker.proc is not None and broker.proc.poll() is None, (
                f"the broker stopped before request {correlation_id} of seed {seed}")
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", broker.port), timeout=ANSWER_TIMEOUT_S)
            try:
                sock.sendall(frame)
                if read_frame(sock):
                    counts["answered"] += 1
                    continue
                counts["closed"] += 1
            except TimeoutError:
                counts["left"] += 1
            except OSError:
                counts["closed"] += 1
            sock.close()
            sock = None
    finally:
        if sock is not None:
            sock.close()
    return counts


def read_frame(sock: socket.socket) -> bool:
    """Reads one response; False if the broker closed the connection instead."""
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return False
    (size,) = struct.unpack(">i", head)
    while size > 0:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            return False
        size -= len(chunk)
    return True


@pytest.mark.parametrize("seed", SEEDS)
def test_mutated_requests_get_answers_or_a_close_never_a_failure(broker: BrokerProcess, seed: int) -> None:
    counts = send_all(broker, seed)
    assert counts["answered"] > REQUESTS_PER_SEED // 4, counts
    assert_unharmed(broker, f"after-seed-{seed}")
