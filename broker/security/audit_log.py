"""The authorizer's audit log (Kafka's ``kafka.authorizer.logger``).

Every denial, and every allowed mutation (create, delete, alter, alter configs), is one event:
principal, client host, listener, the request it came with, operation, resource, the ACL pattern
that decided it, and the decision. With ``authorizer.audit.log.file`` set the events are JSON lines
in that file, kept apart from the broker's log and rotated at ``authorizer.audit.log.max.bytes``
into ``<file>.1`` ... ``<file>.<authorizer.audit.log.backup.count>`` (the oldest deleted), as
Kafka's log4j configuration sends this logger to its own ``kafka-authorizer.log``. Unset, they
go to the broker's own log.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import time
from collections.abc import Callable
from pathlib import Path

import structlog

LOGGER_NAME = "kafka.authorizer.logger"
_broker_log = structlog.get_logger(LOGGER_NAME)


class AuditLog:
    def __init__(self, path: str = "", max_bytes: int = 104_857_600, backups: int = 10,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._file: logging.Logger | None = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups,
                                                           encoding="utf-8", delay=True)
            handler.setFormatter(logging.Formatter("%(message)s"))
            # A logger of its own (one per file), apart from the broker's log and the root logger.
            logger = logging.getLogger(f"{LOGGER_NAME}.file.{path}")
            logger.handlers = [handler]
            logger.propagate = False
            logger.setLevel(logging.INFO)
            self._file = logger

    def decision(self, allowed: bool, **fields: object) -> None:
        event = "authorization_allowed" if allowed else "authorization_denied"
        if self._file is None:
            _broker_log.info(event, **fields)
            return
        now = self.clock()
        line = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z",
            "logger": LOGGER_NAME, "event": event, "decision": "ALLOWED" if allowed else "DENIED", **fields,
        }
        self._file.info(json.dumps(line, separators=(",", ":")))

    def close(self) -> None:
        if self._file is not None:
            for handler in self._file.handlers:
                handler.close()
