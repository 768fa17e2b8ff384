"""KIP-848 consumer groups in the console: members and their assignments (ConsumerGroupDescribe),
seen in a real headless Chromium while a confluent-kafka consumer on ``group.protocol=consumer`` runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.console.harness import (
    chromium,
    chromium_or_skip,
    console_errors,
    live_text,
    running_console,
    save_screenshot,
    screenshots_dir,
    wait_until,
)

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(240)
LIVE_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    chromium_or_skip()
    proc = BrokerProcess(tmp_path_factory.mktemp("console-groups") / "data",
                         {"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        yield proc
    finally:
        proc.kill9()


def _text_with(browser: Any, element_id: str, wanted: str) -> str | None:
    text = live_text(browser, element_id)
    return text if wanted in text else None


def _consume_until_assigned(consumer: Any, partitions: int) -> None:
    deadline = time.monotonic() + LIVE_S
    while time.monotonic() < deadline and len(consumer.assignment()) < partitions:
        consumer.poll(0.2)
    assert len(consumer.assignment()) == partitions, consumer.assignment()


def test_a_consumer_protocol_group_shows_its_members_and_assignment(broker: BrokerProcess, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("kip848", 2, 1)], operation_timeout=30)["kip848"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce("kip848", value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kip848-group",
                         "group.protocol": "consumer", "client.id": "kip848-client",
                         "auto.offset.reset": "earliest"})
    closed = False
    try:
        consumer.subscribe(["kip848"])
        _consume_until_assigned(consumer, 2)
        member_id = consumer.memberid()
        assert member_id
        with running_console(tmp_path, broker.bootstrap) as console, chromium() as browser:
            browser.get(f"{console.url}/groups/kip848-group")
            members = wait_until(lambda: _text_with(browser, "members", member_id), LIVE_S,
                                 "the member on the group page")
            assert "kip848-client" in members and "kip848-0, kip848-1" in members
            assert "consumer group" in browser.find_element("tag name", "main").text
            browser.get(f"{console.url}/groups")
            wait_until(lambda: "kip848-group" in live_text(browser, "groups"), LIVE_S, "the group in the list")
            browser.get(f"{console.url}/groups/kip848-group")
            wait_until(lambda: member_id in live_text(browser, "members"), LIVE_S, "the member again")
            save_screenshot(browser, screenshots_dir(tmp_path), "group-consumer-protocol")
            assert console_errors(browser) == []
            consumer.close()
            closed = True
            wait_until(lambda: "No members." in live_text(browser, "members"), LIVE_S, "the member gone")
    finally:
        if not closed:
            consumer.close()


def test_a_share_group_shows_its_member_and_assignment(tmp_path: Path) -> None:
    """confluent-kafka has no share consumer: the member joins with ShareGroupHeartbeat, as
    the broker's share group tests do, and the console shows it from ShareGroupDescribe."""
    import httpx

    from broker.tools.client import KafkaClient
    from tests.broker.share.test_share_group_apis import OVERRIDES, heartbeat
    from tests.broker.test_group_apis import create_topic

    proc = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        with KafkaClient.connect(proc.bootstrap, timeout_s=20) as client:
            create_topic(client, "shared", 2)
            joined = heartbeat(client, "share-g", "share-member-1", 0, ["shared"])
            assert joined.error_code == 0 and joined.assignment is not None
            with running_console(tmp_path, proc.bootstrap) as console:
                http = httpx.Client(base_url=console.url, timeout=10)

                def shown() -> str | None:
                    heartbeat(client, "share-g", "share-member-1", joined.member_epoch)  # stays a member
                    page = http.get("/part/groups/share-g").text
                    return page if "share-member-1" in page else None

                page = wait_until(shown, LIVE_S, "the share group's member")
                assert "share group" in page and "shared-0, shared-1" in page
    finally:
        proc.kill9()
