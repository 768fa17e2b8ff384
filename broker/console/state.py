"""The running console: its cluster client, the newest snapshot, the poller and the audit log."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import anyio
import structlog

from broker.console.auth import Authenticator
from broker.console.collect import Collector
from broker.console.kafka import ClusterClient
from broker.console.snapshot import EMPTY, Snapshot
from broker.tools.client import ClientError

DEFAULT_REFRESH_S = 2.0

log = structlog.get_logger("cormorant.console")


@dataclass(slots=True)
class ConsoleState:
    client: ClusterClient
    collector: Collector
    refresh_s: float = DEFAULT_REFRESH_S
    authenticator: Authenticator | None = None
    snapshot: Snapshot = EMPTY
    #: Set and replaced on every new snapshot; server-sent-event streams wait on it.
    changed: anyio.Event = field(default_factory=anyio.Event)
    polls: int = 0
    last_poll_s: float = 0.0
    #: The last poll's failure, logged once until it changes or polling recovers.
    failure: str | None = None

    async def poll_once(self) -> None:
        started = time.monotonic()
        failure: str | None = None
        try:
            snapshot = await anyio.to_thread.run_sync(self.collector.collect)
        except ClientError as ex:
            # Keep what was last seen; the banner says why it is not fresh.
            failure = f"cluster unreachable: {ex}"
            if failure != self.failure:
                log.warning("console_poll_failed", error=str(ex))
        except Exception as ex:
            # A reply the console cannot use must not stop the polling: log it and keep going.
            failure = f"poll failed: {type(ex).__name__}: {ex}"
            if failure != self.failure:
                log.exception("console_poll_failed")
        if failure is not None:
            snapshot = replace(self.snapshot, errors=(failure,), generation=self.snapshot.generation + 1)
        elif self.failure is not None:
            log.info("console_poll_recovered")
        self.failure = failure
        self.last_poll_s = time.monotonic() - started
        self.snapshot = snapshot
        self.polls += 1
        changed, self.changed = self.changed, anyio.Event()
        changed.set()

    async def poll_forever(self) -> None:
        while True:
            await self.poll_once()
            await anyio.sleep(self.refresh_s)

    def audit(self, user: str, action: str, subject: str, outcome: str, detail: dict[str, str] | None = None,
              error: str | None = None) -> None:
        """Every mutation, allowed or refused, as one structured log line."""
        log.info("console_mutation", user=user, action=action, subject=subject, outcome=outcome,
                 detail=detail or {}, error=error)
