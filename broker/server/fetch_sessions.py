"""Fetch sessions (KIP-227): the broker remembers what a fetcher asked for last time.

A client opens a session with a full Fetch (epoch 0) and then sends incremental
fetches (epoch 1, 2, ...) naming only the partitions whose fetch position changed and
the ones it no longer wants; the broker reads every partition of the session and
answers only those with something new: records, an error, a diverging epoch, or a
high watermark, last stable offset or log start offset other than the one it last
reported. Epoch -1 closes a session (and fetches without one).

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions; when it
is full a new session may take the place of the least recently used one only if that
one has been idle for ``EVICTION_IDLE_MS`` (Kafka's
``min.incremental.fetch.session.eviction.ms``), otherwise the fetch goes on without a
session (session id 0), which every client accepts.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from wire.errors import ErrorCode
from wire.generated.api_001_fetch import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
    FetchRequestForgottenTopic,
    FetchResponse,
    FetchResponseFetchableTopicResponse,
    FetchResponsePartitionData,
)

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_IDLE_MS = 120_000
MAX_EPOCH = (1 << 31) - 1

#: A partition of a session: (topic id from Fetch v13, else topic name; partition).
PartitionKey = tuple[str | uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What the fetcher asked of one partition, and what it was last told."""

    topic: str  # as the fetcher named it ("" from v13, which names topics by id)
    topic_id: uuid.UUID
    request: FetchRequestFetchPartition
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def note_response(self, pd: FetchResponsePartitionData) -> bool:
        """Records what ``pd`` reports; whether an incremental response must carry it."""
        changed = (
            pd.high_watermark != self.high_watermark
            or pd.last_stable_offset != self.last_stable_offset
            or pd.log_start_offset != self.log_start_offset
        )
        self.high_watermark = pd.high_watermark
        self.last_stable_offset = pd.last_stable_offset
        self.log_start_offset = pd.log_start_offset
        has_records = pd.records is not None and len(pd.records) > 0
        return changed or has_records or pd.error_code != 0 or pd.diverging_epoch.epoch >= 0


@dataclass(slots=True)
class FetchSession:
    id: int
    by_id: bool
    #: The epoch the next incremental fetch must carry.
    epoch: int = 1
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)
    last_used_ms: int = 0

    def key(self, topic: str, topic_id: uuid.UUID, partition: int) -> PartitionKey:
        return (topic_id if self.by_id else topic, partition)

    def update(self, topics: Iterable[FetchRequestFetchTopic],
               forgotten: Iterable[FetchRequestForgottenTopic]) -> None:
        """An incremental fetch's changes: new or moved partitions, then forgotten ones."""
        for topic in topics:
            for fp in topic.partitions:
                key = self.key(topic.topic, topic.topic_id, fp.partition)
                cached = self.partitions.get(key)
                if cached is None:
                    self.partitions[key] = CachedPartition(topic.topic, topic.topic_id, fp)
                else:
                    cached.request = fp
        for gone in forgotten:
            for index in gone.partitions:
                self.partitions.pop(self.key(gone.topic, gone.topic_id, index), None)

    def move_to_end(self, key: PartitionKey) -> None:
        """A partition that just returned records goes last, so that under the response
        size limit the others get their turn."""
        cached = self.partitions.pop(key, None)
        if cached is not None:
            self.partitions[key] = cached


class FetchSessionCache:
    def __init__(self, max_sessions: int, clock_ms: Callable[[], int], rng: random.Random,
                 eviction_idle_ms: int = EVICTION_IDLE_MS) -> None:
        self.max_sessions = max_sessions
        self._clock_ms = clock_ms
        self._rng = rng
        self._eviction_idle_ms = eviction_idle_ms
        # Least recently used first.
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.last_used_ms = self._clock_ms()
            self._sessions[session_id] = session
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def create(self, by_id: bool, partitions: dict[PartitionKey, CachedPartition]) -> FetchSession | None:
        """A new session over ``partitions``, or None when the cache has no room for it."""
        if self.max_sessions <= 0:
            return None
        now = self._clock_ms()
        if len(self._sessions) >= self.max_sessions:
            oldest_id = next(iter(self._sessions))
            if now - self._sessions[oldest_id].last_used_ms < self._eviction_idle_ms:
                return None
            del self._sessions[oldest_id]
        session_id = self._rng.randint(1, MAX_EPOCH)
        while session_id in self._sessions:
            session_id = self._rng.randint(1, MAX_EPOCH)
        session = FetchSession(session_id, by_id, partitions=partitions, last_used_ms=now)
        self._sessions[session_id] = session
        return session


@dataclass(slots=True)
class SessionFetch:
    """A Fetch request seen through its session: the partitions to read, in order."""

    session: FetchSession | None
    epoch: int
    by_id: bool
    wanted: list[tuple[PartitionKey, CachedPartition]]


def open_fetch(sessions: FetchSessionCache, request: FetchRequest, api_version: int) -> SessionFetch | ErrorCode:
    """The partitions a Fetch reads: its session's after the incremental changes, or the
    request's own (a full fetch). An unknown session or a wrong epoch is the error."""
    by_id = api_version >= 13
    epoch = request.session_epoch if api_version >= 7 else FINAL_EPOCH
    if epoch > INITIAL_EPOCH:
        session = sessions.get(request.session_id)
        if session is None:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        session.update(request.topics, request.forgotten_topics_data)
        session.epoch = next_epoch(epoch)
        return SessionFetch(session, epoch, by_id, list(session.partitions.items()))
    if request.session_id != 0:
        sessions.remove(request.session_id)  # a new full fetch (epoch 0) or a close (-1)
    return SessionFetch(None, epoch, by_id, [
        ((t.topic_id if by_id else t.topic, fp.partition), CachedPartition(t.topic, t.topic_id, fp))
        for t in request.topics
        for fp in t.partitions
    ])


def build_response(sessions: FetchSessionCache, fetch: SessionFetch,
                   answers: list[FetchResponsePartitionData]) -> FetchResponse:
    """The response to ``fetch``, whose partitions got ``answers`` (in order): all of them,
    or for an incremental fetch only what changed; opens a session for a full fetch."""
    session = fetch.session
    response = FetchResponse(session_id=0)
    if session is not None:
        response.session_id = session.id
    elif fetch.epoch == INITIAL_EPOCH:
        created = sessions.create(fetch.by_id, dict(fetch.wanted))
        if created is not None:
            response.session_id = created.id
    # Only a session remembers what it was told; sessionless fetches skip the bookkeeping.
    tracked = response.session_id != 0
    current: FetchResponseFetchableTopicResponse | None = None
    for (key, cached), pd in zip(fetch.wanted, answers, strict=True):
        must_respond = cached.note_response(pd) if tracked else True
        if session is not None:
            # Incremental: only what changed; a partition that returned records goes last.
            if not must_respond:
                continue
            if pd.records is not None and len(pd.records) > 0:
                session.move_to_end(key)
        # Consecutive partitions of one topic share an entry, as Kafka groups them.
        if current is None or current.topic != cached.topic or current.topic_id != cached.topic_id:
            current = FetchResponseFetchableTopicResponse(topic=cached.topic, topic_id=cached.topic_id)
            response.responses.append(current)
        current.partitions.append(pd)
    return response
