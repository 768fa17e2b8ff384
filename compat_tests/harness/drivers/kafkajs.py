"""kafkajs 2.2.4 under Node, through ``compat_tests/node/driver.js`` (one process per op).

kafkajs has no ``assign()``: consuming runs the group protocol with a throwaway group. It
ships no zstd codec; snappy and lz4 come from kafkajs-snappy and kafkajs-lz4. Its
``fetchTopicOffsetsByTimestamp`` answers "no offset for that time" with the latest offset
instead of -1.
"""

from __future__ import annotations

import functools
import shutil

from .. import settings
from .base import Capabilities, DriverUnavailable
from .jsonproc import JsonProcessDriver

DRIVER_JS = settings.NODE_DIR / "driver.js"


@functools.cache
def _node_codecs(node: str) -> frozenset[str]:
    probe = KafkajsDriver("127.0.0.1:9")
    return frozenset(probe.call("capabilities", timeout_s=30)["codecs"])


class KafkajsDriver(JsonProcessDriver):
    name = "kafkajs"

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self._capabilities: Capabilities | None = None

    @property
    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            self._capabilities = Capabilities(
                codecs=_node_codecs(self.command()[0]),
                timestamp_miss_is_latest=True,
                assign=False,
            )
        return self._capabilities

    @classmethod
    def check_available(cls) -> None:
        if shutil.which("node") is None:
            raise DriverUnavailable(f"node is not installed ({settings.INSTALL_HINT})")
        if not (settings.NODE_DIR / "node_modules" / "kafkajs").is_dir():
            raise DriverUnavailable(
                "kafkajs is not installed in compat_tests/node (npm ci there, or "
                f"{settings.INSTALL_HINT})"
            )

    def command(self) -> list[str]:
        node = shutil.which("node") or "node"
        return [node, str(DRIVER_JS)]

    def cwd(self) -> str | None:
        return str(settings.NODE_DIR)
