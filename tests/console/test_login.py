"""Logins: users with hashed passwords, required off loopback, checked by a real browser."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from broker.console.auth import load_users, verify_password
from tests.broker.broker_process import BrokerProcess
from tests.console.harness import (
    chromium,
    chromium_or_skip,
    console_errors,
    running_console,
    wait_until,
)
from tests.shared import ROOT

PASSWORD = "correct horse battery"


def _console(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", "console", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=60)


def _add_user(users: Path, name: str, password: str = PASSWORD) -> None:
    result = _console("--users", str(users), "--add-user", name, stdin=password + "\n")
    assert result.returncode == 0, result.stderr


def test_add_user_stores_only_a_salted_hash(tmp_path: Path) -> None:
    users = tmp_path / "users"
    _add_user(users, "alice")
    _add_user(users, "bob")
    text = users.read_text()
    assert PASSWORD not in text
    stored = load_users(users)
    assert set(stored) == {"alice", "bob"} and stored["alice"] != stored["bob"]
    assert verify_password(PASSWORD, stored["alice"]) and not verify_password("wrong password", stored["alice"])
    assert users.stat().st_mode & 0o077 == 0
    short = _console("--users", str(users), "--add-user", "carol", stdin="short\n")
    assert short.returncode == 2 and "at least 8 characters" in short.stderr


def test_listening_off_loopback_without_users_is_refused(tmp_path: Path) -> None:
    result = _console("--bootstrap-server", "127.0.0.1:1", "--bind", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "needs a login" in result.stderr


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", {"metrics.listener": ""}).start()
    try:
        yield proc
    finally:
        proc.kill9()


def test_users_must_log_in_and_mutations_name_them(tmp_path: Path, broker: BrokerProcess) -> None:
    users = tmp_path / "users"
    _add_user(users, "alice")
    with running_console(tmp_path, broker.bootstrap, "--users", str(users)) as console:
        # Without a session: pages redirect to the login, mutations and fragments are refused.
        anonymous = httpx.Client(base_url=console.url, timeout=10)
        page = anonymous.get("/cluster")
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        refused = anonymous.post("/topics", data={"name": "sneaky", "confirm": "yes"}, headers={"HX-Request": "true"})
        assert refused.status_code == 401
        assert anonymous.get("/part/cluster", headers={"HX-Request": "true"}).status_code == 401
        assert anonymous.get("/events").status_code == 303
        assert anonymous.post("/login", data={"username": "alice", "password": "nope"}).status_code == 401
        assert anonymous.post("/login", data={"username": "mallory", "password": PASSWORD}).status_code == 401

        chromium_or_skip()
        with chromium() as browser:
            browser.get(console.url + "/topics")
            assert browser.current_url.startswith(console.url + "/login")
            browser.find_element("id", "username").send_keys("alice")
            browser.find_element("id", "password").send_keys("wrong password")
            browser.find_element("id", "login-submit").click()
            # The click starts a page load that the driver does not wait for.
            wait_until(lambda: "Wrong user name or password" in browser.find_element("id", "login-error").text,
                       10, "the login error")
            browser.find_element("id", "username").clear()
            browser.find_element("id", "username").send_keys("alice")
            browser.find_element("id", "password").send_keys(PASSWORD)
            browser.find_element("id", "login-submit").click()
            wait_until(lambda: browser.current_url == console.url + "/topics", 10, "back on /topics")
            assert "alice" in browser.find_element("tag name", "header").text
            browser.find_element("id", "create-topic").click()
            browser.find_element("id", "new-name").send_keys("from-alice")
            browser.find_element("id", "create-submit").click()
            wait_until(lambda: browser.find_element("id", "confirm").text, 10, "confirmation")
            browser.find_element("id", "confirm-yes").click()
            wait_until(lambda: "Created" in browser.find_element("id", "result").text, 10, "created")
            # The login error above is a 401 the browser reports; nothing else may fail.
            assert [e for e in console_errors(browser) if "401" not in e] == []
        logs = console.logs()
        assert "action=create_topic" in logs and "user=alice" in logs
        assert "action=login" in logs and "outcome=refused" in logs
        assert "sneaky" not in logs


def test_an_unreachable_cluster_is_shown_and_logged_once(tmp_path: Path) -> None:
    with running_console(tmp_path, "127.0.0.1:1") as console:
        http = httpx.Client(base_url=console.url, timeout=10)
        wait_until(lambda: "cluster unreachable" in http.get("/part/cluster").text, 10, "the banner")
        assert http.get("/cluster").status_code == 200
        time.sleep(1.5)  # three more failed polls at --refresh 0.5
        assert console.logs().count("console_poll_failed") == 1
    bad_config = tmp_path / "client.properties"
    bad_config.write_text("bogus.setting=1\n")
    refused = _console("--bootstrap-server", "127.0.0.1:1", "--command-config", str(bad_config))
    assert refused.returncode == 2 and "unsupported client properties: bogus.setting" in refused.stderr
