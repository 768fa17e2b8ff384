"""Three RaftQuorums in one Trio process, over TCP on 127.0.0.1, each behind its own
controller listener (which hands pysyncobj's connections over to it): a leader is
elected and becomes active, committed records reach every voter in order, a stopped
leader is replaced in a higher term, and a restarted voter replays and catches up."""

from __future__ import annotations

from pathlib import Path

import trio

from broker.cluster.cluster_mode import ControllerListener
from broker.server.network import ConnectionInfo, NetworkLimits
from controller.raft import RaftQuorum, RaftSettings
from wire.frame import EncodedFrame
from wire.generated.metadata.rec_012_feature_level_record import FeatureLevelRecord
from wire.primitives import Message

SETTINGS = RaftSettings(election_timeout_min_s=0.4, election_timeout_max_s=0.9, connection_retry_s=0.2)
WAIT_S = 20.0


class NoKafka:
    async def handle(self, conn: ConnectionInfo, frame: bytearray) -> EncodedFrame | None:
        raise AssertionError("no Kafka requests expected")


class Voter:
    def __init__(self, node_id: int, directory: Path, listener: ControllerListener) -> None:
        self.node_id = node_id
        self.directory = directory
        self.listener = listener
        self.quorum: RaftQuorum | None = None
        self.records: list[tuple[int, Message]] = []
        self.scope = trio.CancelScope()

    async def run(self, voters: list[tuple[int, str, int]], task_status: trio.TaskStatus[None]) -> None:
        quorum = RaftQuorum(self.node_id, voters, self.directory, SETTINGS)
        quorum.add_listener(self.records.extend)
        self.quorum = quorum
        self.listener.raft = quorum
        with self.scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(quorum.run)
                task_status.started()


async def wait_for_leader(voters: list[Voter], exclude: int | None = None) -> Voter:
    with trio.fail_after(WAIT_S):
        while True:
            for v in voters:
                if v.node_id != exclude and v.quorum is not None and v.quorum.is_leader():
                    return v
            await trio.sleep(0.05)


async def wait_until(predicate: object) -> None:
    with trio.fail_after(WAIT_S):
        while not predicate():  # type: ignore[operator]
            await trio.sleep(0.05)


def test_three_voters_elect_replicate_fail_over_and_replay(tmp_path: Path) -> None:
    async def main() -> None:
        listeners = [ControllerListener("CONTROLLER", "PLAINTEXT", "127.0.0.1", 0, NoKafka(), NetworkLimits(),
                                        None) for _ in range(3)]  # type: ignore[arg-type]
        for listener in listeners:
            await listener.bind()
        addresses = [(i + 1, "127.0.0.1", lst.bound_port) for i, lst in enumerate(listeners)]
        voters = [Voter(i + 1, tmp_path / f"v{i + 1}", lst) for i, lst in enumerate(listeners)]
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(listener.serve)
            for voter in voters:
                await nursery.start(voter.run, addresses)
            leader = await wait_for_leader(voters)
            assert leader.quorum is not None
            term = leader.quorum.epoch
            for level in range(1, 6):
                await leader.quorum.append([FeatureLevelRecord(name="metadata.version", feature_level=level)])
            await wait_until(lambda: all(len(v.records) == 5 for v in voters))
            assert all(v.records == voters[0].records for v in voters)
            assert [o for o, _ in voters[0].records] == list(range(5))
            described = leader.quorum.describe()
            assert described.leader_id == leader.node_id and described.is_leader

            # The leader stops; the others elect a new one in a later term and go on.
            leader.scope.cancel()
            await wait_until(lambda: leader.quorum is not None and leader.quorum._stopped)
            survivors = [v for v in voters if v is not leader]
            second = await wait_for_leader(survivors, exclude=leader.node_id)
            assert second.quorum is not None and second.quorum.epoch > term
            await second.quorum.append([FeatureLevelRecord(name="metadata.version", feature_level=9)])
            await wait_until(lambda: all(len(v.records) == 6 for v in survivors))

            # The old leader comes back on the same directory: replays, then catches up.
            leader.records = []
            leader.scope = trio.CancelScope()
            await nursery.start(leader.run, addresses)
            await wait_until(lambda: len(leader.records) == 6)
            assert leader.records == second.records
            assert leader.quorum is not None
            await wait_until(lambda: leader.quorum is not None and leader.quorum.caught_up.is_set())
            nursery.cancel_scope.cancel()

    trio.run(main)
