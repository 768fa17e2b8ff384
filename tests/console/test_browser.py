"""The console in a real headless Chromium, against a real broker: every page loads without
console errors and shows what the cluster holds, live; every mutation asks first and works.

Run with CORMORANT_CONSOLE_SCREENSHOTS=1 to refresh the screenshots in docs/console/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.broker_process import BrokerProcess
from tests.console.harness import (
    ConsoleProcess,
    chromium,
    chromium_or_skip,
    console_errors,
    live_text,
    running_console,
    save_screenshot,
    screenshots_dir,
    wait_until,
)
from tests.integration.quorum_cluster import free_ports

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.admin._config import ConfigResource  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(300)
#: How long a change may take to show: a poll (0.5 s here) and a fragment fetch, on a busy machine.
LIVE_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    chromium_or_skip()
    base = tmp_path_factory.mktemp("console-broker")
    metrics_port = free_ports(1)[0]
    proc = BrokerProcess(base / "data", {"metrics.listener": f"127.0.0.1:{metrics_port}",
                                         "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        yield proc, f"http://127.0.0.1:{metrics_port}/metrics"
    finally:
        proc.kill9()


@pytest.fixture(scope="module")
def console(broker: tuple[BrokerProcess, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    proc, metrics_url = broker
    with running_console(tmp_path_factory.mktemp("console"), proc.bootstrap, "--metrics-url", metrics_url) as c:
        yield c


@pytest.fixture(scope="module")
def browser(console: ConsoleProcess) -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, name: str, partitions: int = 1, replication: int = 1) -> None:
    admin = _admin(bootstrap)  # kept alive until the result is in
    futures = admin.create_topics([NewTopic(name, partitions, replication)], operation_timeout=30)
    futures[name].result(30)


def _text(driver: Any, element_id: str) -> str:
    return live_text(driver, element_id)


def _click(driver: Any, element_id: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, element_id).click()


def _fill(driver: Any, element_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def _open(driver: Any, url: str) -> None:
    driver.get(url)
    assert console_errors(driver) == [], url


def test_pages_show_what_the_cluster_holds(broker: tuple[BrokerProcess, str], console: ConsoleProcess,
                                          browser: Any, tmp_path: Path) -> None:
    proc, _ = broker
    shots = screenshots_dir(tmp_path)
    _open(browser, console.url + "/cluster")
    assert _text(browser, "broker-count") == "1"
    assert _text(browser, "quorum-leader") == "1"

    # A topic a client creates appears on the open topics page, without a reload.
    _open(browser, console.url + "/topics")
    _create(proc.bootstrap, "orders", partitions=3)
    wait_until(lambda: "orders" in _text(browser, "topics"), LIVE_S, "orders on the topics page")

    # A produced JSON record is shown decoded, with its key and headers.
    producer = Producer({"bootstrap.servers": proc.bootstrap})
    for i in range(5):
        producer.produce("orders", key=f"order-{i}".encode(), partition=0, headers=[("origin", b"till-3")],
                         value=json.dumps({"order": i, "item": "kettle", "price": 24.5}).encode())
    producer.flush(30)
    _open(browser, console.url + "/topics/orders")
    def decoded() -> str | None:
        text = _text(browser, "records")
        return text if '"item": "kettle"' in text else None

    records = wait_until(decoded, LIVE_S, "decoded records")
    assert '"order": 4' in records and "order-4" in records and "origin: till-3" in records
    wait_until(lambda: "5" in _text(browser, "partitions").split("\n")[1].split(), LIVE_S, "log end 5")
    save_screenshot(browser, shots, "topic")

    # The key filter keeps only matching records; the hex view shows the bytes.
    _fill(browser, "m-key", "order-3")
    _click(browser, "m-load")
    wait_until(lambda: "order-3" in _text(browser, "records") and "order-2" not in _text(browser, "records"),
               LIVE_S, "key filter")
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "m-view")).select_by_visible_text("hex")
    _click(browser, "m-load")
    wait_until(lambda: "7b 22 6f 72 64 65 72 22" in _text(browser, "records"), LIVE_S, "hex view")

    # A lagging group shows its exact lag: 10 records, committed at 4.
    _create(proc.bootstrap, "ledger")
    for i in range(10):
        producer.produce("ledger", value=f"entry {i}".encode())
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "audit", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("ledger", 0, 4)], asynchronous=False)
    consumer.close()
    _open(browser, console.url + "/groups")
    wait_until(lambda: "audit" in _text(browser, "groups"), LIVE_S, "group audit listed")
    row = wait_until(lambda: next((r for r in _text(browser, "groups").split("\n") if r.startswith("audit")
                                   and r.split()[-2] == "6"), None), LIVE_S, "audit's total lag of 6")
    assert "Empty" in row and "ledger" in row
    save_screenshot(browser, shots, "groups")
    _open(browser, console.url + "/groups/audit")
    assert _text(browser, "group-lag") == "6"
    assert "ledger 0 4 10 6" in _text(browser, "lag")
    save_screenshot(browser, shots, "group")

    # A live consumer: the group is Stable, with its member, client id and assignment.
    reader = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "readers", "client.id": "reader-1",
                       "auto.offset.reset": "earliest"})
    try:
        reader.subscribe(["orders"])
        wait_until(lambda: reader.poll(0.2) is not None or bool(reader.assignment()), 30, "an assignment")
        # Open the group's page once the console has seen the group (before, it answers 404).
        _open(browser, console.url + "/groups")
        wait_until(lambda: "readers" in _text(browser, "groups"), LIVE_S, "group readers listed")
        _open(browser, console.url + "/groups/readers")
        wait_until(lambda: _text(browser, "group-state") == "Stable", LIVE_S, "a stable group")
        members = wait_until(lambda: (m := _text(browser, "members")) and "orders-2" in m and m, LIVE_S,
                             "the member's assignment")
        assert "reader-1" in str(members) and "orders-0, orders-1, orders-2" in str(members)
    finally:
        reader.close()

    _open(browser, console.url + "/topics")
    save_screenshot(browser, shots, "topics")
    _open(browser, console.url + "/cluster")
    wait_until(lambda: "points" in _text(browser, "live"), LIVE_S, "charts with data")
    save_screenshot(browser, shots, "cluster")
    assert console_errors(browser) == []


def test_mutations_ask_first_and_are_logged(broker: tuple[BrokerProcess, str], console: ConsoleProcess,
                                            browser: Any, tmp_path: Path) -> None:
    proc, _ = broker
    shots = screenshots_dir(tmp_path)
    admin = _admin(proc.bootstrap)

    def topics() -> set[str]:
        return set(admin.list_topics(timeout=10).topics)

    # Create: the confirmation comes first; Cancel creates nothing.
    _open(browser, console.url + "/topics")
    _click(browser, "create-topic")
    _fill(browser, "new-name", "made-in-console")
    _fill(browser, "new-partitions", "2")
    _fill(browser, "new-rf", "1")
    _fill(browser, "new-configs", "cleanup.policy=compact")
    _click(browser, "create-submit")
    prompt = wait_until(lambda: _text(browser, "confirm"), LIVE_S, "create confirmation")
    assert "Create topic 'made-in-console' with 2 partitions" in prompt
    save_screenshot(browser, shots, "confirm-create")
    _click(browser, "confirm-no")
    wait_until(lambda: not browser.find_elements("id", "confirm"), LIVE_S, "confirmation closed")
    assert "made-in-console" not in topics()
    _click(browser, "create-submit")
    wait_until(lambda: _text(browser, "confirm"), LIVE_S, "create confirmation")
    _click(browser, "confirm-yes")
    assert "Created topic 'made-in-console'" in wait_until(lambda: _text(browser, "result"), LIVE_S, "created")
    assert "made-in-console" in topics()

    # Alter a config, add partitions: each confirmed, each visible to a client afterwards.
    _open(browser, console.url + "/topics/made-in-console")
    _fill(browser, "c-key", "retention.ms")
    _fill(browser, "c-value", "3600000")
    _click(browser, "c-submit")
    assert "Set retention.ms=3600000" in wait_until(lambda: _text(browser, "confirm"), LIVE_S, "alter confirmation")
    _click(browser, "confirm-yes")
    wait_until(lambda: "Set retention.ms" in _text(browser, "result"), LIVE_S, "altered")
    resource = ConfigResource(ConfigResource.Type.TOPIC, "made-in-console")
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["retention.ms"].value == "3600000"
    assert described["cleanup.policy"].value == "compact"

    _fill(browser, "p-count", "3")
    _click(browser, "p-submit")
    assert "from 2 to 3 partitions" in wait_until(lambda: _text(browser, "confirm"), LIVE_S, "grow confirmation")
    _click(browser, "confirm-yes")
    wait_until(lambda: "now has 3 partitions" in _text(browser, "result"), LIVE_S, "grown")
    assert len(admin.list_topics("made-in-console", timeout=10).topics["made-in-console"].partitions) == 3
    browser.refresh()
    assert "DYNAMIC_TOPIC_CONFIG" in _text(browser, "configs")

    # Reset offsets: the dry run shows every partition's current and new offset first.
    _open(browser, console.url + "/groups/audit")
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "r-target")).select_by_value("earliest")
    _click(browser, "r-submit")
    dry_run = wait_until(lambda: _text(browser, "dry-run"), LIVE_S, "dry run")
    assert "ledger 0 4 0" in dry_run
    save_screenshot(browser, shots, "reset-dry-run")
    _click(browser, "confirm-yes")
    wait_until(lambda: "Committed 1 offsets" in _text(browser, "result"), LIVE_S, "reset applied")
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "audit"})
    assert consumer.committed([TopicPartition("ledger", 0)], timeout=10)[0].offset == 0
    consumer.close()
    wait_until(lambda: _text(browser, "group-lag") == "10", LIVE_S, "lag 10 after the reset")

    # Delete: a warning first, then the topic is gone.
    _open(browser, console.url + "/topics/made-in-console")
    _click(browser, "d-submit")
    assert "cannot be undone" in wait_until(lambda: _text(browser, "confirm"), LIVE_S, "delete confirmation")
    _click(browser, "confirm-yes")
    wait_until(lambda: "Deleted topic" in _text(browser, "result"), LIVE_S, "deleted")
    wait_until(lambda: "made-in-console" not in topics(), LIVE_S, "topic gone")
    assert console_errors(browser) == []

    logged = [json_line for json_line in console.logs().splitlines() if "console_mutation" in json_line]
    actions = " ".join(logged)
    for action in ("create_topic", "alter_config", "add_partitions", "reset_offsets", "delete_topic"):
        assert f"action={action}" in actions, action
    assert sum("outcome=ok" in line for line in logged) == 5


def test_message_browser_pages_from_an_offset_a_time_and_the_end(broker: tuple[BrokerProcess, str],
                                                                 console: ConsoleProcess) -> None:
    import re

    import httpx

    proc, _ = broker
    _create(proc.bootstrap, "paged")
    producer = Producer({"bootstrap.servers": proc.bootstrap})
    base_ms = 1_700_000_000_000
    for i in range(12):
        producer.produce("paged", key=f"k{i % 3}".encode(), value=f"v{i}".encode(), timestamp=base_ms + i * 1000)
    producer.flush(30)
    http = httpx.Client(base_url=console.url, timeout=30)

    def offsets(query: str) -> list[int]:
        page = http.get(f"/topics/paged/messages?{query}")
        assert page.status_code == 200, page.text
        return [int(o) for o in re.findall(r"<tr><td>(\d+)</td>", page.text)]

    assert offsets("start=beginning&size=5") == [0, 1, 2, 3, 4]
    assert offsets("start=offset&offset=5&size=5") == [5, 6, 7, 8, 9]
    assert offsets("start=newest&size=5") == [7, 8, 9, 10, 11]
    assert offsets(f"start=time&time={base_ms + 9500}&size=5") == [10, 11]
    assert offsets("start=time&time=2023-11-14T22:13:30&size=2") == [10, 11]  # base_ms + 10 s, UTC
    assert offsets("start=beginning&key=k1&size=3") == [1, 4, 7]
    # The key filter's next page starts after the last record it read, not the last it showed.
    page = http.get("/topics/paged/messages?start=beginning&key=k1&size=3").text
    assert "offset=8" in page
    assert offsets("start=offset&offset=8&key=k1&size=3") == [10]
    assert offsets("start=offset&offset=12") == []
    assert http.get("/topics/paged/messages?start=sideways").status_code == 400
    assert "does not exist" in http.get("/topics/paged/messages?partition=7").text


def test_transactions_page_shows_an_open_transaction(broker: tuple[BrokerProcess, str], console: ConsoleProcess,
                                                     browser: Any, tmp_path: Path) -> None:
    proc, _ = broker
    _create(proc.bootstrap, "payments")
    producer = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "payments-writer",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("payments", value=b"pending")
    producer.flush(30)
    _open(browser, console.url + "/transactions")

    def row() -> str | None:
        found = [r for r in _text(browser, "transactions").splitlines() if r.startswith("payments-writer")]
        return found[0] if found else None

    open_row = wait_until(lambda: (r := row()) is not None and "Ongoing" in r and r, LIVE_S, "an ongoing transaction")
    assert "payments-0" in str(open_row) and "60000 ms" in str(open_row)
    save_screenshot(browser, screenshots_dir(tmp_path), "transactions")
    producer.commit_transaction(30)
    wait_until(lambda: (r := row()) is not None and "CompleteCommit" in r, LIVE_S, "the committed transaction")
    assert console_errors(browser) == []


def test_cross_site_and_rebound_requests_are_refused(broker: tuple[BrokerProcess, str],
                                                     console: ConsoleProcess) -> None:
    import httpx

    proc, _ = broker
    http = httpx.Client(base_url=console.url, timeout=30)
    change = {"name": "cross-site", "partitions": "1", "confirm": "yes"}
    # A form another site posts (no htmx header), or any POST from another origin, changes nothing.
    assert http.post("/topics", data=change).status_code == 403
    assert http.post("/topics", data=change, headers={"HX-Request": "true",
                                                      "Origin": "http://evil.example"}).status_code == 403
    # A DNS name rebound to 127.0.0.1 is not loopback: refused even for reading.
    assert http.get("/cluster", headers={"Host": "evil.example:9021"}).status_code == 421
    assert http.get("/cluster", headers={"Host": "localhost"}).status_code == 200
    assert "cross-site" not in set(_admin(proc.bootstrap).list_topics(timeout=10).topics)
    same_site = http.post("/topics", data=change, headers={"HX-Request": "true", "Origin": console.url})
    assert same_site.status_code == 200 and "Created topic &#39;cross-site&#39;" in same_site.text
