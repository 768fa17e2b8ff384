"""The console as a user starts it (``cormorant console`` subprocess) and a headless Chromium to look at it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.shared import ROOT

READY = re.compile(r"^cormorant console ready url=(http://\S+)")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,900")
_T = TypeVar("_T")


class ConsoleProcess:
    def __init__(self, workdir: Path, bootstrap: str, *extra: str) -> None:
        self.args = [sys.executable, "-m", "broker", "console", "--bootstrap-server", bootstrap, "--port", "0",
                     "--refresh", "0.5", *extra]
        self.log_path = workdir / "console.log"
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, timeout_s: float = 30.0) -> ConsoleProcess:
        with open(self.log_path, "a") as err:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                         stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            match = READY.match(line) if line else None
            if match:
                self.url = match.group(1).rstrip("/")
                return self
            if not line and self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"console did not start:\n{self.logs()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def logs(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


@contextmanager
def running_console(workdir: Path, bootstrap: str, *extra: str) -> Iterator[ConsoleProcess]:
    console = ConsoleProcess(workdir, bootstrap, *extra).start()
    try:
        yield console
    finally:
        console.stop()


def chromium_or_skip() -> None:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/install_test_deps.sh)")
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium driven through Debian's chromedriver; closed however the test ends."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def live_text(driver: Any, element_id: str) -> str:
    """An element's text; read again when htmx swapped the element between finding and reading it."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(20):
        try:
            return str(driver.find_element("id", element_id).text)
        except StaleElementReferenceException:
            time.sleep(0.05)
    return str(driver.find_element("id", element_id).text)


def console_errors(driver: Any) -> list[str]:
    """The page's console messages at SEVERE level since the last call (script errors, failed loads)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_until(check: Callable[[], _T | None], timeout_s: float, what: str) -> _T:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as ex:  # the page is being swapped: try again
            last = ex
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout_s}s (last: {last!r})")


def screenshots_dir(tmp_path: Path) -> Path:
    """Where screenshots go: docs/console/ when CORMORANT_CONSOLE_SCREENSHOTS=1, else the test's tmp dir."""
    if os.environ.get("CORMORANT_CONSOLE_SCREENSHOTS") == "1":
        out = ROOT / "docs" / "console"
    else:
        out = tmp_path / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    return out


def save_screenshot(driver: Any, directory: Path, name: str) -> Path:
    """A PNG of the page, quantized to a small palette when Pillow is there (they are committed)."""
    path = directory / f"{name}.png"
    driver.save_screenshot(str(path))
    try:
        from PIL import Image
    except ImportError:
        return path
    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=64).save(path, optimize=True)
    return path

