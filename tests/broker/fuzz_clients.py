"""Real clients for the stateful fuzz test (tests/broker/test_client_fuzz.py), run as
``python -m tests.broker.fuzz_clients BOOTSTRAP SEED SECONDS`` in a process of their own:
a client fed answers to requests the proxy changed may fail in any way, even crash its
process, and the test starts another.

For SECONDS: an admin creating, listing and deleting topics; an idempotent, a
transactional and a zstd producer; two consumers of a classic group, two of a KIP-848
group and two share consumers, all on topics t0-t4. Every client error is ignored: only
the broker is under test."""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

TOPICS = [f"t{i}" for i in range(5)]
#: A client is closed and made anew this often (joins, leaves, new producer ids).
CLIENT_LIFE_S = 15.0
CALL_TIMEOUT_S = 5.0


def forever(stop: threading.Event, body: Callable[[], None]) -> None:
    while not stop.is_set():
        try:
            body()
        except Exception:  # a confused client is expected here
            time.sleep(0.2)


def admin_round(bootstrap: str, rng: random.Random, stop: threading.Event) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
    for i in range(50):
        if stop.is_set():
            return
        for future in admin.create_topics([NewTopic(rng.choice(TOPICS), 2, 1)], request_timeout=3).values():
            _settle(future)
        admin.list_topics(timeout=3)
        if i % 7 == 6:
            for future in admin.delete_topics([rng.choice(TOPICS)], request_timeout=3).values():
                _settle(future)
        _settle(admin.list_consumer_groups(request_timeout=3))


def producer_round(bootstrap: str, rng: random.Random, stop: threading.Event, settings: dict[str, Any]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 5000, **settings})
    transactional = "transactional.id" in settings
    if transactional:
        producer.init_transactions(CALL_TIMEOUT_S)
    for _ in range(200):
        if stop.is_set():
            break
        if transactional:
            producer.begin_transaction()
        for key in range(20):
            producer.produce(rng.choice(TOPICS), key=str(key).encode(), value=rng.randbytes(rng.randrange(1, 300)))
        if transactional:
            try:
                producer.commit_transaction(CALL_TIMEOUT_S)
            except KafkaException:
                producer.abort_transaction(CALL_TIMEOUT_S)
        producer.flush(CALL_TIMEOUT_S)


def consumer_round(bootstrap: str, stop: threading.Event, settings: dict[str, Any]) -> None:
    extra = {} if settings.get("group.protocol") == "consumer" else {"session.timeout.ms": 6000,
                                                                      "heartbeat.interval.ms": 500}
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", **extra, **settings})
    consumer.subscribe(TOPICS)
    ends = time.monotonic() + CLIENT_LIFE_S
    while time.monotonic() < ends and not stop.is_set():
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            try:
                consumer.commit(message, asynchronous=True)
            except KafkaException:
                pass
    consumer.close()


def share_round(bootstrap: str, stop: threading.Event) -> None:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-share"})
    consumer.subscribe(TOPICS)
    ends = time.monotonic() + CLIENT_LIFE_S
    while time.monotonic() < ends and not stop.is_set():
        try:
            consumer.poll(0.3)
        except KafkaException:
            pass
    consumer.close()


def _settle(future: Any) -> None:
    try:
        future.result(CALL_TIMEOUT_S)
    except Exception:  # refusals are expected
        pass


def main(bootstrap: str, seed: int, seconds: float) -> None:
    stop = threading.Event()
    rngs = [random.Random(seed * 100 + i) for i in range(4)]
    rounds: list[Callable[[], None]] = [
        lambda: admin_round(bootstrap, rngs[0], stop),
        lambda: producer_round(bootstrap, rngs[1], stop, {"acks": "all", "enable.idempotence": True}),
        lambda: producer_round(bootstrap, rngs[2], stop, {"transactional.id": f"fuzz-tx-{seed}"}),
        lambda: producer_round(bootstrap, rngs[3], stop, {"acks": "1", "compression.type": "zstd"}),
        *[lambda: consumer_round(bootstrap, stop, {"group.id": "fuzz-classic"})] * 2,
        *[lambda: consumer_round(bootstrap, stop, {"group.id": "fuzz-848", "group.protocol": "consumer"})] * 2,
        *[lambda: share_round(bootstrap, stop)] * 2,
    ]
    for body in rounds:
        threading.Thread(target=forever, args=(stop, body), daemon=True).start()
    time.sleep(seconds)
    stop.set()
    time.sleep(1.0)
    # Clients still closing are not waited for: the broker is what is under test.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
