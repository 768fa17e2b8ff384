"""The ACLs and Quotas pages in a real headless Chromium against a broker with the
StandardAuthorizer: they show what the cluster holds, each change asks first, and a client
(confluent-kafka's AdminClient) sees its effect. Without an authorizer the ACL page says so."""

from __future__ import annotations

import time
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

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

pytestmark = pytest.mark.timeout(240)
LIVE_S = 30.0
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, ConsoleProcess]]:
    chromium_or_skip()
    base = tmp_path_factory.mktemp("console-access")
    # The console and the test's admin client connect as User:ANONYMOUS, a super user here.
    proc = BrokerProcess(base / "data", {"authorizer.class.name": AUTHORIZER,
                                         "super.users": "User:ANONYMOUS"}).start()
    try:
        with running_console(base, proc.bootstrap) as console:
            yield proc, console
    finally:
        proc.kill9()


@pytest.fixture(scope="module")
def browser(secured: tuple[BrokerProcess, ConsoleProcess]) -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _all_acls(admin: AdminClient) -> list[Any]:
    match_all = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                 AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(match_all, request_timeout=30)
    return list(found.result(timeout=30))


def _select(browser: Any, element_id: str, text: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", element_id)).select_by_visible_text(text)


def _click_live(browser: Any, css: str) -> None:
    """Click a button in a live table, again when a live update swapped the table meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(20):
        try:
            browser.find_element("css selector", css).click()
            return
        except StaleElementReferenceException:
            time.sleep(0.05)
    raise AssertionError(f"{css} kept being replaced")


def _confirm(browser: Any, expected: str) -> None:
    confirm = wait_until(lambda: live_text(browser, "confirm"), 10, "the confirmation")
    assert expected in confirm, confirm
    browser.find_element("id", "confirm-yes").click()


def test_acls_listed_filtered_added_and_deleted(secured: tuple[BrokerProcess, ConsoleProcess], browser: Any,
                                                tmp_path: Path) -> None:
    proc, console = secured
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    reader = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                        AclOperation.READ, AclPermissionType.ALLOW)
    other = AclBinding(ResourceType.GROUP, "billing-", ResourcePatternType.PREFIXED, "User:bob", "*",
                       AclOperation.ALL, AclPermissionType.DENY)
    for future in admin.create_acls([reader, other], request_timeout=30).values():
        future.result(timeout=30)

    browser.get(f"{console.url}/acls")
    table = live_text(browser, "acls")
    assert "User:alice" in table and "orders" in table and "READ" in table and "ALLOW" in table
    assert "User:bob" in table and "billing-" in table and "PREFIXED" in table and "DENY" in table
    save_screenshot(browser, screenshots_dir(tmp_path), "acls")
    browser.get(f"{console.url}/acls?principal=User:alice")
    assert "User:bob" not in live_text(browser, "acls") and "User:alice" in live_text(browser, "acls")
    browser.get(f"{console.url}/acls?resource=bill")
    assert "User:alice" not in live_text(browser, "acls") and "User:bob" in live_text(browser, "acls")

    # Add: the form asks first; Cancel changes nothing, Confirm creates it.
    browser.get(f"{console.url}/acls")
    browser.find_element("css selector", "#create-acl summary").click()
    browser.find_element("id", "new-principal").send_keys("User:carol")
    browser.find_element("id", "new-resource-name").send_keys("payments")
    _select(browser, "new-operation", "WRITE")
    browser.find_element("id", "create-acl-submit").click()
    wait_until(lambda: live_text(browser, "confirm"), 10, "the confirmation")
    browser.find_element("id", "confirm-no").click()
    assert not any(b.principal == "User:carol" for b in _all_acls(admin))
    browser.find_element("id", "create-acl-submit").click()
    _confirm(browser, "ALLOW User:carol from * to WRITE on TOPIC 'payments' (LITERAL)?")
    wait_until(lambda: "Created the ACL" in live_text(browser, "result"), 10, "created")
    carol = [b for b in _all_acls(admin) if b.principal == "User:carol"]
    assert [(b.name, b.operation, b.permission_type, b.restype) for b in carol] == [
        ("payments", AclOperation.WRITE, AclPermissionType.ALLOW, ResourceType.TOPIC)]

    # Delete alice's binding, exactly that one.
    browser.get(f"{console.url}/acls?principal=User:alice")
    _click_live(browser, "#acls .delete-acl")
    _confirm(browser, "Delete the ACL: ALLOW User:alice from * to READ on TOPIC 'orders' (LITERAL)?")
    wait_until(lambda: "Deleted the ACL" in live_text(browser, "result"), 10, "deleted")
    left = {(b.principal, b.name) for b in _all_acls(admin)}
    assert left == {("User:bob", "billing-"), ("User:carol", "payments")}
    # The open page follows the cluster without a reload.
    browser.get(f"{console.url}/acls")
    dave = AclBinding(ResourceType.TOPIC, "audit", ResourcePatternType.LITERAL, "User:dave", "*",
                      AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    for future in admin.create_acls([dave], request_timeout=30).values():
        future.result(timeout=30)
    wait_until(lambda: "User:dave" in live_text(browser, "acls"), LIVE_S, "a new ACL on the open page")
    assert console_errors(browser) == []
    logs = console.logs()
    assert "action=create_acl" in logs and "action=delete_acl" in logs


def test_quotas_listed_set_and_removed(secured: tuple[BrokerProcess, ConsoleProcess], browser: Any,
                                       tmp_path: Path) -> None:
    proc, console = secured
    browser.get(f"{console.url}/quotas")
    assert "No client quotas" in live_text(browser, "quotas")
    browser.find_element("css selector", "#set-quota summary").click()
    _select(browser, "quota-entity-type", "user")
    browser.find_element("id", "quota-entity-name").send_keys("alice")
    _select(browser, "quota-key", "producer_byte_rate")
    browser.find_element("id", "quota-value").send_keys("1048576")
    browser.find_element("id", "set-quota-submit").click()
    _confirm(browser, "Set producer_byte_rate=1048576 for user 'alice'?")
    wait_until(lambda: "Set producer_byte_rate" in live_text(browser, "result"), 10, "set")
    assert _quotas(proc.bootstrap) == {"user=alice": {"producer_byte_rate": 1048576.0}}

    browser.get(f"{console.url}/quotas")
    table = live_text(browser, "quotas")
    assert "user=alice" in table and "producer_byte_rate" in table and "1048576" in table
    save_screenshot(browser, screenshots_dir(tmp_path), "quotas")
    _click_live(browser, "#quotas .remove-quota")
    _confirm(browser, "Remove producer_byte_rate of user 'alice'?")
    wait_until(lambda: "Removed producer_byte_rate" in live_text(browser, "result"), 10, "removed")
    assert _quotas(proc.bootstrap) == {}
    assert console_errors(browser) == []
    assert "action=alter_quota" in console.logs()


def _quotas(bootstrap: str) -> dict[str, dict[str, float]]:
    """What the cluster holds, as the CLI equivalent (``cormorant configs``) reads it: DescribeClientQuotas."""
    from broker.tools.client import KafkaClient
    from wire.generated.api_048_describe_client_quotas import (
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    )

    with KafkaClient.connect(bootstrap) as client:
        response = client.send(DescribeClientQuotasRequest(components=[], strict=False), DescribeClientQuotasResponse)
    return {",".join(f"{e.entity_type}={e.entity_name}" for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries or []}


def test_without_an_authorizer_the_acl_page_says_so(tmp_path: Path) -> None:
    chromium_or_skip()
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        with running_console(tmp_path, proc.bootstrap) as console, chromium() as browser:
            browser.get(f"{console.url}/acls")
            assert "no authorizer (SECURITY_DISABLED)" in live_text(browser, "no-authorizer")
            assert console_errors(browser) == []
    finally:
        proc.kill9()
