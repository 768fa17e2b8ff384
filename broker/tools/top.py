"""``cormorant top``: a terminal view over a broker's own Prometheus endpoint.

Rates come from two scrapes ``--interval`` seconds apart. The screen is
redrawn in place with ANSI escapes (cursor home, clear to end of line/screen),
so no curses is needed; ``--once`` prints a single frame without escapes.
Only metric names from docs/metrics.md are read.

A scrape says which broker it belongs to (``target_info``: ``cormorant_node_id``,
``cormorant_cluster_id``). Before drawing, top asks the broker at ``--bootstrap-server``
(Metadata) for its node id and cluster id and refuses an endpoint that belongs to another
broker, e.g. when two brokers share a host and the second one could not bind the default
metrics port. With neither option given the defaults are checked against each other when
a broker answers at the default address; an explicit ``--metrics-url`` alone is taken as is.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TextIO

from prometheus_client.parser import text_string_to_metric_families

from broker.tools.client import ClientError, KafkaClient, parse_bootstrap
from broker.tools.common import DEFAULT_BOOTSTRAP
from wire.generated.api_003_metadata import MetadataRequest, MetadataResponse

DEFAULT_URL = "http://127.0.0.1:9464/metrics"
SCRAPE_TIMEOUT_S = 5.0
MAX_ROWS = 10
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"

Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrape:
    at: float
    samples: dict[str, dict[Labels, float]] = field(default_factory=lambda: defaultdict(dict))

    def get(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        return sum(v for k, v in self.samples.get(name, {}).items() if _matches(k, labels))

    def series(self, name: str) -> dict[Labels, float]:
        return self.samples.get(name, {})


def _matches(key: Labels, wanted: dict[str, str]) -> bool:
    have = dict(key)
    return all(have.get(k) == v for k, v in wanted.items())


def parse(text: str, at: float) -> Scrape:
    scrape = Scrape(at)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            scrape.samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return scrape


def fetch(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        text = response.read().decode("utf-8", "replace")
    return parse(text, time.monotonic())


def _rate(prev: Scrape, cur: Scrape, name: str, **labels: str) -> float:
    dt = cur.at - prev.at
    if dt <= 0:
        return 0.0
    return max(cur.get(name, **labels) - prev.get(name, **labels), 0.0) / dt


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1000
    return f"{n:,.1f} GB"


def _int(n: float) -> str:
    return f"{int(n):,}"


def render(prev: Scrape, cur: Scrape, url: str) -> list[str]:
    info = dict(next(iter(cur.series("target_info")), ()))
    lines = [
        f"cormorant top  {url}  node {info.get('cormorant_node_id', '?')}  "
        f"cluster {info.get('cormorant_cluster_id', '?')}  {time.strftime('%Y-%m-%d %H:%M:%S')}",
        "",
    ]
    errors_s = _rate(prev, cur, "cormorant_request_errors_total")
    lines.append(
        f"connections {_int(cur.get('cormorant_network_connection_active'))}   "
        f"in flight {_int(cur.get('cormorant_request_active'))}   "
        f"in {_bytes(_rate(prev, cur, 'cormorant_network_io_bytes_total', direction='receive'))}/s   "
        f"out {_bytes(_rate(prev, cur, 'cormorant_network_io_bytes_total', direction='transmit'))}/s   "
        f"produced {_rate(prev, cur, 'cormorant_produce_records_total'):,.0f} rec/s   "
        f"errors {errors_s:,.1f}/s"
    )
    leaders = cur.get("cormorant_replication_partitions", role="leader")
    followers = cur.get("cormorant_replication_partitions", role="follower")
    lines.append(
        f"partitions {_int(leaders + followers)} (leading {_int(leaders)})   "
        f"under-replicated {_int(cur.get('cormorant_replication_under_replicated'))}   "
        f"under-min-ISR {_int(cur.get('cormorant_replication_under_min_isr'))}   "
        f"max follower lag {_int(cur.get('cormorant_replication_max_lag'))}   "
        f"ISR shrinks {_int(cur.get('cormorant_replication_isr_changes_total', change='shrink'))}"
    )
    lines.append(
        f"groups {_int(cur.get('cormorant_group_count'))} (members {_int(cur.get('cormorant_group_members'))})   "
        f"open transactions {_int(cur.get('cormorant_transaction_open'))}   "
        f"controller {'active' if cur.get('cormorant_controller_active') else 'standby'} "
        f"term {_int(cur.get('cormorant_controller_raft_term'))}   "
        f"delayed produce {_int(cur.get('cormorant_produce_delayed'))} fetch {_int(cur.get('cormorant_fetch_delayed'))}"
    )
    lines.append(
        f"log files open {_int(cur.get('cormorant_log_open_files'))}"
        f" / budget {_int(cur.get('cormorant_log_open_files_budget'))}   "
        f"evictions {_rate(prev, cur, 'cormorant_log_open_files_evictions_total'):,.0f}/s"
        f" ({_int(cur.get('cormorant_log_open_files_evictions_total'))} total)"
    )
    lines += ["", f"{'API':<28}{'req/s':>10}{'mean ms':>10}{'total':>12}"]
    rows = []
    for key, total in cur.series("cormorant_request_duration_seconds_count").items():
        api = dict(key).get("api", "?")
        if not total:
            continue
        count_delta = total - prev.get("cormorant_request_duration_seconds_count", api=api)
        sum_delta = cur.get("cormorant_request_duration_seconds_sum", api=api) - prev.get(
            "cormorant_request_duration_seconds_sum", api=api
        )
        dt = max(cur.at - prev.at, 1e-9)
        mean_ms = (sum_delta / count_delta * 1000) if count_delta > 0 else 0.0
        rows.append((count_delta / dt, total, api, mean_ms))
    for rate, total, api, mean_ms in sorted(rows, reverse=True):
        lines.append(f"{api:<28}{rate:>10,.1f}{mean_ms:>10,.2f}{_int(total):>12}")
    if not rows:
        lines.append("(no requests yet)")
    error_rows = []
    for key, total in cur.series("cormorant_request_errors_total").items():
        labels = dict(key)
        delta = total - prev.get("cormorant_request_errors_total", **labels)
        error_rows.append((delta, total, labels.get("api", "?"), labels.get("error", "?")))
    if error_rows:
        lines += ["", f"{'ERRORS':<28}{'error':<34}{'per s':>8}{'total':>10}"]
        dt = max(cur.at - prev.at, 1e-9)
        for delta, total, api, error in sorted(error_rows, reverse=True)[:MAX_ROWS]:
            lines.append(f"{api:<28}{error:<34}{delta / dt:>8,.1f}{_int(total):>10}")
    lines += _partition_health(cur)
    lines += _group_lag(cur)
    return lines


def _partition_health(cur: Scrape) -> list[str]:
    lag: dict[tuple[str, str], float] = defaultdict(float)
    for key, value in cur.series("cormorant_replication_follower_lag").items():
        labels = dict(key)
        tp = (labels.get("topic", "?"), labels.get("partition", "?"))
        lag[tp] = max(lag[tp], value)
    isr = {(dict(k).get("topic", "?"), dict(k).get("partition", "?")): v
           for k, v in cur.series("cormorant_replication_isr_size").items()}
    replicas: dict[tuple[str, str], int] = defaultdict(lambda: 1)
    for key in cur.series("cormorant_replication_follower_lag"):
        labels = dict(key)
        replicas[(labels.get("topic", "?"), labels.get("partition", "?"))] += 1
    rows = [(lag.get(tp, 0.0), tp, isr.get(tp, 0.0), replicas[tp]) for tp in set(lag) | set(isr)
            if lag.get(tp, 0.0) > 0 or isr.get(tp, 0.0) < replicas[tp]]
    out = ["", f"{'PARTITIONS WITH LAG OR SHRUNK ISR':<40}{'ISR':>8}{'follower lag':>14}"]
    if not rows:
        return [*out, f"none of {len(isr):,} led partitions"]
    for value, (topic, partition), size, total in sorted(rows, reverse=True)[:MAX_ROWS]:
        out.append(f"{f'{topic}-{partition}':<40}{f'{int(size)}/{total}':>8}{_int(value):>14}")
    return out


def _group_lag(cur: Scrape) -> list[str]:
    series = cur.series("cormorant_group_lag")
    if not series:
        return []
    per_group: dict[str, float] = defaultdict(float)
    for key, value in series.items():
        per_group[dict(key).get("group", "?")] += value
    out = ["", f"{'CONSUMER GROUP':<40}{'partitions':>12}{'total lag':>14}"]
    counts: dict[str, int] = defaultdict(int)
    for key in series:
        counts[dict(key).get("group", "?")] += 1
    for group, total in sorted(per_group.items(), key=lambda kv: -kv[1])[:MAX_ROWS]:
        out.append(f"{group:<40}{counts[group]:>12,}{_int(total):>14}")
    return out


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    node_id: str
    cluster_id: str

    def __str__(self) -> str:
        return f"node {self.node_id} of cluster {self.cluster_id}"


def scraped_identity(scrape: Scrape) -> BrokerIdentity | None:
    info = dict(next(iter(scrape.series("target_info")), ()))
    node, cluster = info.get("cormorant_node_id"), info.get("cormorant_cluster_id")
    if node is None or cluster is None:
        return None
    return BrokerIdentity(node, cluster)


def broker_identity(bootstrap: str) -> BrokerIdentity:
    """The node id and cluster id of the broker listening at ``bootstrap``."""
    host, port = parse_bootstrap(bootstrap)
    with KafkaClient.connect(bootstrap, timeout_s=SCRAPE_TIMEOUT_S) as client:
        response = client.send(MetadataRequest(topics=[]), MetadataResponse)
    same_port = [b for b in response.brokers if b.port == port]
    match = [b for b in same_port if b.host == host] or same_port
    if len(match) != 1:
        raise ClientError(f"no broker in the metadata of {bootstrap} listens on port {port}")
    return BrokerIdentity(str(match[0].node_id), response.cluster_id or "?")


def check_endpoint(url: str, scrape: Scrape, bootstrap: str | None) -> str | None:
    """Why ``url`` is not the endpoint of the broker at ``bootstrap``, or None when it is (or
    when no broker answers at the default address)."""
    try:
        expected = broker_identity(bootstrap or DEFAULT_BOOTSTRAP)
    except ClientError as ex:
        return None if bootstrap is None else f"cannot ask {bootstrap} which broker it is: {ex}"
    scraped = scraped_identity(scrape)
    if scraped is None:
        return f"{url} does not say which broker it belongs to (no target_info)"
    if scraped != expected:
        return (
            f"{url} serves the metrics of {scraped}, but the broker at "
            f"{bootstrap or DEFAULT_BOOTSTRAP} is {expected}: give that broker's --metrics-url "
            "(its ready line prints it; so does `cormorant cluster status`)"
        )
    return None


def _draw(out: TextIO, lines: Iterable[str], ansi: bool) -> None:
    if ansi:
        out.write(HOME + "".join(f"{line}{CLEAR_LINE}\n" for line in lines) + CLEAR_BELOW)
    else:
        out.write("".join(f"{line}\n" for line in lines))
    out.flush()


def run_top(
    url: str, interval_s: float, once: bool, out: TextIO = sys.stdout, bootstrap: str | None = None
) -> int:
    try:
        prev = fetch(url)
    except (urllib.error.URLError, OSError, ValueError) as ex:
        print(f"cormorant top: cannot read {url}: {getattr(ex, 'reason', ex)}", file=sys.stderr)
        return 1
    # An endpoint chosen without naming its broker is taken as is; the defaults are checked
    # against each other (the default endpoint may belong to another broker on this host).
    problem = check_endpoint(url, prev, bootstrap) if bootstrap or url == DEFAULT_URL else None
    if problem is not None:
        print(f"cormorant top: {problem}", file=sys.stderr)
        return 1
    ansi = not once and out.isatty()
    if ansi:
        out.write(HIDE_CURSOR + HOME + CLEAR_BELOW)
    try:
        while True:
            time.sleep(interval_s)
            try:
                cur = fetch(url)
            except (urllib.error.URLError, OSError, ValueError) as ex:
                if once:
                    print(f"cormorant top: cannot read {url}: {getattr(ex, 'reason', ex)}", file=sys.stderr)
                    return 1
                _draw(out, [f"cormorant top  {url}", "", f"unreachable: {getattr(ex, 'reason', ex)}"], ansi)
                continue
            _draw(out, render(prev, cur, url), ansi)
            if once:
                return 0
            prev = cur
    except KeyboardInterrupt:
        return 0
    finally:
        if ansi:
            out.write(SHOW_CURSOR)
            out.flush()
