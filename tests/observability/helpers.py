"""A broker process with its metrics endpoint on an ephemeral port, and readers for
docs/metrics.md and the Prometheus text it serves."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.broker.broker_process import READY, BrokerProcess
from tests.shared import ROOT

METRICS_URL = re.compile(r" metrics=(http://\S+/metrics)")
SCRAPE_TIMEOUT_S = 10.0


class MetricsBroker(BrokerProcess):
    """BrokerProcess that keeps its ready line (for the metrics URL) and logs JSON."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        base = {"metrics.listener": "127.0.0.1:0", "log.format": "json"}
        super().__init__(data_dir, {**base, **(overrides or {})})
        self.env = env or {}
        self.metrics_url = ""

    def start(self, timeout: float = 30.0) -> MetricsBroker:
        args = [sys.executable, "-m", "broker", "serve",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.data_dir}"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with open(self.stderr_path, "a") as err:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                         env={**os.environ, **self.env})
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line:
                match = READY.match(line)
                if match:
                    self.port = int(match.group(2))
                    url = METRICS_URL.search(line)
                    self.metrics_url = url.group(1) if url else ""
                    return self
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.02)
        self.kill9()
        raise RuntimeError(f"broker did not become ready:\n{self.logs()[-3000:]}")

    def log_events(self) -> list[dict[str, object]]:
        events = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
        return events


Series = dict[tuple[tuple[str, str], ...], float]


def scrape(url: str) -> dict[str, Series]:
    """Sample name -> {sorted label pairs: value}."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    out: dict[str, Series] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(samples: dict[str, Series], name: str, **labels: str) -> float:
    return sum(v for k, v in samples.get(name, {}).items() if all(dict(k).get(a) == b for a, b in labels.items()))


def series_count(samples: dict[str, Series]) -> int:
    return sum(len(s) for s in samples.values())


@dataclass(frozen=True)
class MetricDoc:
    name: str
    kind: str
    unit: str
    attributes: tuple[str, ...]
    series: str
    prometheus: str


_ROW = re.compile(r"^\| `(cormorant\.[a-z0-9_.]+)` \| (\w+) \| `([^`]*)` \| ([^|]*) \| ([^|]*) \| `([a-z0-9_]+)` \|")


def metric_dictionary() -> list[MetricDoc]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    docs = []
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            attrs = tuple(re.findall(r"`([a-z_]+)`", match.group(4)))
            docs.append(MetricDoc(match.group(1), match.group(2), match.group(3), attrs,
                                  match.group(5).strip(), match.group(6)))
    return docs
