"""Drivers whose client runs in another runtime (Node, Java): one process per operation.

The command is one JSON object on stdin::

    {"op": "produce", "bootstrap": "127.0.0.1:PORT", "idempotence": null,
     "timeouts": {"request_ms": ..., "delivery_ms": ..., "api_ms": ...}, ...op arguments}

ops and their arguments / results:

    capabilities                                          -> {"codecs": [...]}
    produce   topic, acks, compression, records[]         -> {"deliveries": [[partition, offset|null]]}
              record = {key, value, headers: [[name, value]], timestamp|null, partition|null}
    consume   topic, partitions[], count, start ("beginning"|offset), timeout_ms
                                                          -> {"records": [{partition, offset, key,
                                                              value, headers, timestamp}]}
    list_offsets  topic, partition, spec ("earliest"|"latest"|timestamp) -> {"offset": n}
    metadata                                              -> {"brokers": [[id, host, port]],
                                                              "topics": {name: partitions}}
    create_topic  name, partitions, configs{}             -> {}
    describe_configs  topic                               -> {"configs": {name: value}}
    alter_config  topic, key, value                       -> {}
    delete_topic  name                                    -> {}
    group_member  topic, group, options{}, count|null     -> events on stdout (harness/groups.py);
                  the command comes in argv, closing stdin stops the member
    list_groups                                           -> {"groups": {id: state|null}}
    describe_group  group                                 -> {"state", "members": [{member_id,
                                                              client_id, host, instance_id,
                                                              partitions: [[topic, p]]}]}
    delete_group  group                                   -> {}
    committed_offsets  group, topic                       -> {"offsets": {partition: offset}}
    txn_produce   topic, transactional_id, transactions[{commit, records[]}]
                                                          -> {"transactions": [{"deliveries",
                                                              "committed"}]} (harness/transactions.py)
    consume_isolated  topic, partitions[], count, isolation ("read_committed"|
                  "read_uncommitted"), timeout_ms          -> {"records": [...]}, from the beginning

Bytes (keys, values, header values) are base64 strings; null stays null. The process prints
one line ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"name", "code",
"message"}}`` as its last stdout line; logs go to stderr.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .. import settings
from ..groups import GroupDescription, GroupMember, GroupOptions, MemberDescription
from .base import (
    ClientError,
    ClusterMetadata,
    Codec,
    ConsumedRecord,
    Delivery,
    Driver,
    OffsetSpec,
    Record,
    sort_consumed,
)


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class JsonProcessDriver(Driver):
    """Runs ``self.command()`` once per operation with the JSON command on stdin."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def cwd(self) -> str | None:
        return None

    def _idempotence(self) -> bool | None:
        """None keeps the client's default (True or False would force it)."""
        return None

    def call(self, op: str, timeout_s: float = settings.SUBPROCESS_TIMEOUT_S, **args: Any) -> Any:
        payload = {
            "op": op,
            "bootstrap": self.bootstrap,
            "idempotence": self._idempotence(),
            "timeouts": {
                "request_ms": settings.REQUEST_TIMEOUT_MS,
                "delivery_ms": settings.DELIVERY_TIMEOUT_MS,
                "api_ms": settings.API_TIMEOUT_MS,
            },
            **args,
        }
        try:
            proc = subprocess.run(
                self.command(),
                input=json.dumps(payload).encode(),
                capture_output=True,
                timeout=timeout_s,
                cwd=self.cwd(),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            tail = (exc.stderr or b"")[-3000:].decode("utf-8", "replace")
            raise ClientError(self.name, f"{op} timed out after {timeout_s} s\n{tail}") from exc
        stderr = proc.stderr.decode("utf-8", "replace")
        result_line = None
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            if line.startswith('{"ok"'):
                result_line = line
        if result_line is None:
            raise ClientError(
                self.name, f"{op}: no result (exit {proc.returncode}); stderr:\n{stderr[-3000:]}"
            )
        doc = json.loads(result_line)
        if not doc["ok"]:
            err = doc["error"]
            raise ClientError(
                self.name,
                f"{err.get('message')}\nstderr tail:\n{stderr[-1500:]}",
                code=err.get("code"),
                name=err.get("type") or err.get("name") or "",
            )
        return doc["result"]

    # -- data ------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        records: Sequence[Record],
        *,
        acks: int = -1,
        compression: Codec = "none",
    ) -> list[Delivery]:
        result = self.call(
            "produce",
            topic=topic,
            acks=acks,
            compression=compression,
            records=[
                {
                    "key": b64(r.key),
                    "value": b64(r.value),
                    "headers": [[name, b64(value)] for name, value in r.headers],
                    "timestamp": r.timestamp_ms,
                    "partition": r.partition,
                }
                for r in records
            ],
        )
        return [
            Delivery(p, None if acks == 0 or o is None or o < 0 else o)
            for p, o in result["deliveries"]
        ]

    def consume(
        self,
        topic: str,
        partitions: Sequence[int],
        *,
        count: int,
        start: int | Literal["beginning"] = "beginning",
        timeout_s: float = 20.0,
    ) -> list[ConsumedRecord]:
        result = self.call(
            "consume",
            timeout_s=timeout_s + settings.SUBPROCESS_TIMEOUT_S,
            topic=topic,
            partitions=list(partitions),
            count=count,
            start=start,
            timeout_ms=int(timeout_s * 1000),
        )
        return sort_consumed(
            [
                ConsumedRecord(
                    partition=r["partition"],
                    offset=r["offset"],
                    key=unb64(r["key"]),
                    value=unb64(r["value"]),
                    headers=tuple((name, unb64(value)) for name, value in r["headers"]),
                    timestamp_ms=r["timestamp"],
                )
                for r in result["records"]
            ]
        )

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        result = self.call("list_offsets", topic=topic, partition=partition, spec=spec)
        return int(result["offset"])

    def metadata(self) -> ClusterMetadata:
        result = self.call("metadata")
        return ClusterMetadata(
            brokers=frozenset((int(i), str(h), int(p)) for i, h, p in result["brokers"]),
            topics={str(k): int(v) for k, v in result["topics"].items()},
        )

    # -- admin -----------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> None:
        self.call("create_topic", name=name, partitions=partitions, configs=dict(configs or {}))

    def describe_topic_configs(self, topic: str) -> dict[str, str | None]:
        return dict(self.call("describe_configs", topic=topic)["configs"])

    def alter_topic_config(self, topic: str, key: str, value: str) -> None:
        self.call("alter_config", topic=topic, key=key, value=value)

    def delete_topic(self, name: str) -> None:
        self.call("delete_topic", name=name)

    # -- consumer groups (harness/groups.py) -------------------------------------------------

    def start_member(
        self, topic: str, group: str, options: GroupOptions, *, count: int | None = None
    ) -> GroupMember:
        payload = {
            "op": "group_member",
            "bootstrap": self.bootstrap,
            "timeouts": {"request_ms": settings.REQUEST_TIMEOUT_MS, "api_ms": settings.API_TIMEOUT_MS},
            "topic": topic,
            "group": group,
            "options": options.to_json(),
            "count": count,
        }
        # The command goes in argv: stdin stays open, and closing it stops the member.
        return GroupMember(self.name, [*self.command(), json.dumps(payload)], cwd=self.cwd())

    def list_groups(self) -> dict[str, str | None]:
        return dict(self.call("list_groups")["groups"])

    def describe_group(self, group: str) -> GroupDescription:
        result = self.call("describe_group", group=group)
        return GroupDescription(group, result["state"], tuple(
            MemberDescription(m["member_id"], m["client_id"], m["host"], m.get("instance_id"),
                              frozenset((t, int(p)) for t, p in m["partitions"]))
            for m in result["members"]))

    def delete_group(self, group: str) -> None:
        self.call("delete_group", group=group)

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        offsets = self.call("committed_offsets", group=group, topic=topic)["offsets"]
        return {int(p): int(o) for p, o in offsets.items() if int(o) >= 0}
