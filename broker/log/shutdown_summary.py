"""The clean-shutdown summary: what a clean start needs of every partition directory, in one file.

A clean :meth:`~broker.log.manager.LogManager.close` writes, before the clean shutdown
marker, one file per log directory holding each partition directory's file names and its
segments' sizes and next offsets. A start that finds the marker reads it instead of
listing each partition directory, taking a ``stat`` of each ``.log`` and reading each
active segment's last batch: with a hundred thousand partitions those are most of a clean
start. Kafka trusts a clean shutdown the same way (no recovery, indexes checked when first
used); the summary only saves the look at the files.

The summary is removed at every start, before the marker, whether it was used or not: it
never outlives the one start that follows the shutdown that wrote it, so it cannot speak
for files changed since. A partition whose directory held anything a start must clean up
(an interrupted delete, clean or swap, an index without its ``.log``) gets no entry and is
listed and loaded as without a summary; so does one the summary does not match (its
``.log`` names differ).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.log.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    write_atomically,
)

log = structlog.get_logger(__name__)

SUMMARY_FILE = "cleanshutdown-log-summary"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """One segment as a clean shutdown left it."""

    base_offset: int
    size: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class PartitionListing:
    """A partition directory as a clean shutdown left it: its file names (sorted) and its
    segments in offset order."""

    names: tuple[str, ...]
    segments: tuple[SegmentSummary, ...]

    def matches_names(self) -> bool:
        """Whether the segments are exactly the ``.log`` files among the names."""
        # The names are sorted, and zero-padded offsets sort as numbers: the ``.log`` names
        # come in the segments' order.
        return [name for name in self.names if name.endswith(LOG_SUFFIX)] == [
            f"{segment.base_offset:020d}{LOG_SUFFIX}" for segment in self.segments
        ]


def list_partition_dir(directory: Path, segments: Iterable[SegmentSummary]) -> PartitionListing | None:
    """``directory``'s listing with ``segments``, or None if a start must look at it itself."""
    with os.scandir(directory) as entries:  # the entry types come with the listing: no stat each
        names = tuple(sorted(entry.name for entry in entries if entry.is_file()))
    logs = {name[: -len(LOG_SUFFIX)] for name in names if name.endswith(LOG_SUFFIX)}
    for name in names:
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)):
            return None
        if any(name.endswith(suffix) and name[: -len(suffix)] not in logs for suffix in INDEX_SUFFIXES):
            return None
    listing = PartitionListing(names, tuple(segments))
    return listing if listing.matches_names() else None


def write_summary(log_dir: Path, listings: Mapping[str, PartitionListing]) -> None:
    """Write ``log_dir``'s summary (partition directory name -> listing), durably."""
    body = {
        "version": _VERSION,
        "partitions": {
            dir_name: [list(listing.names), [[s.base_offset, s.size, s.next_offset] for s in listing.segments]]
            for dir_name, listing in listings.items()
        },
    }
    write_atomically(log_dir / SUMMARY_FILE, json.dumps(body, separators=(",", ":")).encode())


def take_summary(log_dir: Path, clean_shutdown: bool) -> dict[str, PartitionListing]:
    """The listings the last clean shutdown wrote (none unless ``clean_shutdown``); the file is
    read once: the caller removes it with :func:`remove_summary` once loading is done."""
    path = log_dir / SUMMARY_FILE
    if not clean_shutdown:
        return {}
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        body = json.loads(raw)
        if not isinstance(body, dict) or body.get("version") != _VERSION:
            raise ValueError(f"unknown version {body.get('version') if isinstance(body, dict) else None!r}")
        return {
            str(dir_name): PartitionListing(
                tuple(sys.intern(str(name)) for name in names),  # the same few names in every partition
                tuple(SegmentSummary(int(base), int(size), int(end)) for base, size, end in segments),
            )
            for dir_name, (names, segments) in body["partitions"].items()
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # Nothing is lost: every partition is listed and read as without a summary.
        log.warning("clean_shutdown_summary_ignored", path=str(path), error=str(exc))
        return {}


def remove_summary(log_dir: Path) -> None:
    """Remove the summary (before the clean shutdown marker: see the module's docstring)."""
    (log_dir / SUMMARY_FILE).unlink(missing_ok=True)
