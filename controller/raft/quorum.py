"""The Trio side: :class:`RaftQuorum`, the replicated :class:`controller.quorum.MetadataQuorum`."""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import trio
from pysyncobj.config import FAIL_REASON

from controller.image import MetadataImage
from controller.quorum import (
    CommitListener,
    NotControllerError,
    QuorumDescription,
    QuorumTimeoutError,
    StaleWriteError,
)
from controller.raft.batch import REJECTED, STALE, Batch, decode_batch, encode_batch
from controller.raft.core import RaftCore, open_journal
from controller.raft.events import (
    LEADER,
    AppendDone,
    CaughtUp,
    Committed,
    RaftEvent,
    RaftSettings,
    RaftStatus,
    Reset,
    StatusChanged,
)
from controller.raft.seams import is_raft_connection, simulated_time
from controller.state import apply_all
from wire.primitives import Message

log = structlog.get_logger(__name__)

#: At most this many committed records (whole entries) reach the listeners at once.
MAX_DELIVERY_RECORDS = 10_000


@dataclass(slots=True)
class _PendingAppend:
    done: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: int = FAIL_REASON.SUCCESS


class RaftQuorum:
    """The replicated metadata quorum, for Trio code.

    ``voters`` are (node id, host, port) from ``controller.quorum.voters``. Call
    :meth:`run` in a nursery (it starts pysyncobj and stops it when cancelled);
    the other methods are for the Trio thread.
    """

    def __init__(
        self,
        node_id: int,
        voters: Sequence[tuple[int, str, int]],
        directory: Path,
        settings: RaftSettings | None = None,
    ) -> None:
        self.node_id = node_id
        self.voters = {voter: f"{host}:{port}" for voter, host, port in voters}
        self.directory = directory
        self.settings = settings or RaftSettings()
        self._core: RaftCore | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._events: collections.deque[RaftEvent] = collections.deque()
        self._wakeup = trio.Event()
        self._listeners: list[CommitListener] = []
        self._reset_listeners: list[Callable[[MetadataImage], None]] = []
        self._activation_listeners: list[Callable[[int], None]] = []
        self._end_offset = 0
        self._log_start_offset = 0
        self._base_image = MetadataImage()
        self._tail: collections.deque[tuple[int, Message]] = collections.deque()
        self._changed = trio.Event()
        self._pending: dict[int, _PendingAppend] = {}
        self._tokens = itertools.count(1)
        self._active_term: int | None = None
        self._establishing: int | None = None
        self.caught_up = trio.Event()
        self._observers: dict[int, int] = {}
        self._stopped = False
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------ MetadataQuorum

    @property
    def status(self) -> RaftStatus:
        return self._core.status if self._core is not None else RaftStatus(self.node_id)

    @property
    def leader_id(self) -> int:
        return self.status.leader_id

    @property
    def epoch(self) -> int:
        return self.status.term

    @property
    def end_offset(self) -> int:
        return self._end_offset

    def is_leader(self) -> bool:
        status = self.status
        return status.role == LEADER and self._active_term is not None and status.term == self._active_term

    def add_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    def add_reset_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        self._reset_listeners.append(listener)

    def add_activation_listener(self, listener: Callable[[int], None]) -> None:
        """``listener(term)`` runs when this node becomes the active controller."""
        self._activation_listeners.append(listener)

    async def append(self, records: Sequence[Message]) -> int:
        if not self.is_leader():
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        _, end = await self._submit(encode_batch(records, self._end_offset))
        return end - 1

    def close(self) -> None:
        if self._core is not None and not self._stopped:
            self._stopped = True
            self._core.destroy()

    # ------------------------------------------------------------ lifecycle

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self.directory.mkdir(parents=True, exist_ok=True)
        journal = await trio.to_thread.run_sync(open_journal, self.directory)
        # Built on this (the main) thread: pysyncobj's thread stops when its creator's does.
        self._core = RaftCore(self.node_id, self.voters, self.directory, self.settings,
                              on_event=self._post, auto_tick=True, journal=journal)
        log.info("raft_started", node_id=self.node_id, voters=sorted(self.voters.items()),
                 term=journal.getCurrentTerm(), entries=len(journal))
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                    while self._events:
                        event = self._events.popleft()
                        if isinstance(event, Committed):
                            # Entries committed together (a start-up's replay, a follower catching
                            # up) reach the listeners as one batch: one delta, one new image.
                            committed = [event]
                            while self._events and isinstance(self._events[0], Committed) and \
                                    sum(len(c.records) for c in committed) < MAX_DELIVERY_RECORDS:
                                next_event = self._events.popleft()
                                assert isinstance(next_event, Committed)
                                committed.append(next_event)
                            self._deliver(committed)
                        else:
                            self._handle(event)
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        if self._core is None or self._stopped:
            return
        self._stopped = True
        self._active_term = None
        core = self._core
        await trio.to_thread.run_sync(core.destroy)
        log.info("raft_stopped", node_id=self.node_id)

    def adopt_connection(self, sock: socket.socket) -> None:
        """Hands a peer's connection (accepted by the controller listener) to pysyncobj."""
        if self._core is None or self._stopped:
            sock.close()
            return
        self._core.adopt(sock)

    # ------------------------------------------------------------ events

    def _post(self, event: RaftEvent) -> None:
        # pysyncobj's thread (or Trio's, for appends refused at once).
        self._events.append(event)
        token = self._token
        if token is None:
            return
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(self._wake, idempotent=True)

    def _wake(self) -> None:
        self._wakeup.set()

    def _handle(self, event: RaftEvent) -> None:
        if isinstance(event, Committed):
            self._deliver([event])
        elif isinstance(event, Reset):
            self._reset(event.image)
        elif isinstance(event, AppendDone):
            pending = self._pending.get(event.token)
            if pending is not None:
                pending.result, pending.error = event.result, event.error
                pending.done.set()
        elif isinstance(event, StatusChanged):
            self._on_status(event.status)
        elif isinstance(event, CaughtUp):
            self.caught_up.set()

    def _deliver(self, events: Sequence[Committed]) -> None:
        committed: list[tuple[int, Message]] = []
        for event in events:
            if event.base_offset != self._end_offset:
                raise AssertionError(f"committed records at {event.base_offset}, expected {self._end_offset}")
            committed.extend((event.base_offset + i, record) for i, record in enumerate(event.records))
            self._end_offset = event.base_offset + len(event.records)
        self._tail.extend(committed)
        if committed:
            for listener in self._listeners:
                listener(committed)
        if len(self._tail) > self.settings.retained_records:
            trimmed = [self._tail.popleft() for _ in range(len(self._tail) - self.settings.retained_records)]
            self._base_image = apply_all(self._base_image, trimmed)
            self._log_start_offset = trimmed[-1][0] + 1
        self._notify_changed()

    def _reset(self, image: MetadataImage) -> None:
        self._tail.clear()
        self._base_image = image
        self._log_start_offset = self._end_offset = image.offset + 1
        for listener in self._reset_listeners:
            listener(image)
        self._notify_changed()

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _on_status(self, status: RaftStatus) -> None:
        if status.role != LEADER:
            if self._active_term is not None:
                log.info("controller_deactivated", node_id=self.node_id, term=self._active_term)
            self._active_term = None
            return
        if self._active_term == status.term or self._establishing == status.term:
            return
        if self._nursery is not None:
            self._establishing = status.term
            self._nursery.start_soon(self._establish, status.term)

    async def _establish(self, term: int) -> None:
        # The leader is active once an entry of its own term commits: by then it has
        # applied everything committed before it (Raft §8, KRaft's leader change).
        try:
            await self._submit(encode_batch([], 0, unconditional=True))
        except (NotControllerError, QuorumTimeoutError) as ex:
            log.info("controller_activation_failed", node_id=self.node_id, term=term, error=str(ex))
            return
        finally:
            if self._establishing == term:
                self._establishing = None
        status = self.status
        if status.role == LEADER and status.term == term and not self._stopped:
            self._active_term = term
            log.info("controller_activated", node_id=self.node_id, term=term, end_offset=self._end_offset)
            for listener in self._activation_listeners:
                listener(term)

    async def _submit(self, payload: bytes) -> tuple[int, int]:
        core = self._core
        if core is None or self._stopped:
            raise NotControllerError("the quorum is not running")
        token = next(self._tokens)
        pending = _PendingAppend()
        self._pending[token] = pending
        try:
            core.submit(payload, functools.partial(self._append_done, token))
            with trio.fail_after(self.settings.append_timeout_s):
                await pending.done.wait()
        except trio.TooSlowError:
            raise QuorumTimeoutError(f"metadata append not committed within {self.settings.append_timeout_s}s") from None
        finally:
            self._pending.pop(token, None)
        if pending.error != FAIL_REASON.SUCCESS:
            raise NotControllerError(f"metadata append failed: {_fail_reason(pending.error)}")
        if pending.result == STALE:
            raise StaleWriteError("the metadata log moved on while this write was prepared")
        if pending.result == REJECTED or not isinstance(pending.result, tuple):
            raise ValueError("the metadata batch was refused by the state machine")
        base, end = pending.result
        return int(base), int(end)

    def _append_done(self, token: int, result: Any, error: int) -> None:
        self._post(AppendDone(token, result, error))

    # ------------------------------------------------------------ reading the log

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    def snapshot(self) -> MetadataImage:
        """The image at ``log_start_offset - 1``: what a broker behind the retained records starts from."""
        return self._base_image

    def read(self, offset: int, max_records: int) -> list[tuple[int, Message]]:
        """Committed records from ``offset`` (which must be at least ``log_start_offset``)."""
        if offset < self._log_start_offset or offset >= self._end_offset:
            return []
        start = offset - self._log_start_offset
        return list(itertools.islice(self._tail, start, start + max_records))

    async def wait_for_records(self, offset: int, timeout_s: float) -> None:
        """Returns once records past ``offset`` are committed, or after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            while self._end_offset <= offset:
                await self._changed.wait()

    def record_observer(self, replica_id: int, fetch_offset: int) -> None:
        if replica_id >= 0 and replica_id not in self.voters:
            self._observers[replica_id] = fetch_offset

    def describe(self) -> QuorumDescription:
        status = self.status
        voters = tuple((voter, status.voter_end_offsets.get(voter, -1)) for voter in sorted(self.voters))
        return QuorumDescription(
            leader_id=status.leader_id,
            epoch=status.term,
            high_watermark=self._end_offset,
            is_leader=status.role == LEADER,
            voters=voters,
            observers=tuple(sorted(self._observers.items())),
        )


def _fail_reason(code: int) -> str:
    for name in dir(FAIL_REASON):
        if not name.startswith("_") and getattr(FAIL_REASON, name) == code:
            return name
    return str(code)


__all__ = [
    "LEADER",
    "Batch",
    "QuorumDescription",
    "RaftCore",
    "RaftQuorum",
    "RaftSettings",
    "RaftStatus",
    "decode_batch",
    "encode_batch",
    "is_raft_connection",
    "open_journal",
    "simulated_time",
]
