"""``cormorant features`` against a real broker: describe as kafka-features.sh prints it,
upgrade, downgrade and disable through UpdateFeatures, dry runs that change nothing, and
refusals that exit 1."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from broker.cli import main
from tests.broker.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("features") / "data").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.logs()[-3000:]


def features(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["features", "--bootstrap-server", broker.bootstrap, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def finalized(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    code, out, err = features(broker, capsys, "describe")
    assert (code, err) == (0, "")
    levels = {}
    for line in out.splitlines():
        match = re.fullmatch(r"Feature: (\S+)\tSupportedMinVersion: (.+)\tSupportedMaxVersion: (.+)\t"
                             r"FinalizedVersionLevel: (.+)\tEpoch: (\d+)", line)
        assert match, line
        levels[match.group(1)] = match.group(4)
    return levels


def test_describe_lists_every_supported_feature(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = features(broker, capsys, "describe")
    assert code == 0
    lines = out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [
        "Feature: group.version", "Feature: kraft.version", "Feature: metadata.version", "Feature: share.version",
        "Feature: transaction.version"]
    assert re.fullmatch(r"Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.3-IV0\t"
                        r"FinalizedVersionLevel: 4.3-IV0\tEpoch: \d+", lines[2])
    assert lines[4].startswith("Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
                               "FinalizedVersionLevel: 2\t")


def test_downgrade_disable_and_upgrade(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    assert features(broker, capsys, "downgrade", "--feature", "transaction.version=1", "--dry-run") == (
        0, "transaction.version can be downgraded to 1.\n", "")
    assert finalized(broker, capsys)["transaction.version"] == "2"
    assert features(broker, capsys, "downgrade", "--feature", "transaction.version=1") == (
        0, "transaction.version was downgraded to 1.\n", "")
    assert finalized(broker, capsys)["transaction.version"] == "1"
    assert features(broker, capsys, "disable", "--feature", "share.version") == (
        0, "share.version was disabled.\n", "")
    assert finalized(broker, capsys)["share.version"] == "0"
    code, out, _ = features(broker, capsys, "upgrade", "--feature", "transaction.version=2",
                            "--feature", "share.version=1")
    assert (code, out) == (0, "transaction.version was upgraded to 2.\nshare.version was upgraded to 1.\n")
    levels = finalized(broker, capsys)
    assert (levels["transaction.version"], levels["share.version"]) == ("2", "1")


def test_refusals_exit_1(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = features(broker, capsys, "upgrade", "--feature", "transaction.version=3")
    assert code == 1
    assert out.startswith("Could not upgrade transaction.version to 3. ")
    assert err == "cormorant features: 1 out of 1 operation(s) failed.\n"
    # metadata.version is never downgraded; by release name as kafka-features.sh takes it.
    code, out, _ = features(broker, capsys, "downgrade", "--feature", "metadata.version=3.9-IV0", "--unsafe")
    assert code == 1 and out.startswith("Could not downgrade metadata.version to 3.9-IV0. ")
    # A release names every feature's level; an older release would lower metadata.version.
    assert features(broker, capsys, "upgrade", "--release-version", "4.3", "--dry-run") == (
        0, "metadata.version can be upgraded to 4.3-IV0.\ngroup.version can be upgraded to 1.\n"
           "transaction.version can be upgraded to 2.\nshare.version can be upgraded to 1.\n", "")
    code, out, _ = features(broker, capsys, "upgrade", "--release-version", "4.0", "--dry-run")
    assert code == 1 and out.startswith("Could not upgrade metadata.version to 4.0-IV3. ")
    code, _, err = features(broker, capsys, "upgrade", "--release-version", "4.3", "--feature", "group.version=1")
    assert code == 1 and "release-version" in err
    code, _, err = features(broker, capsys, "upgrade", "--metadata", "9.9")
    assert code == 1 and err.startswith("cormorant features: Unknown metadata.version 9.9.")
    code, _, err = features(broker, capsys, "upgrade", "--feature", "group.version")
    assert code == 1 and "feature=level" in err
    assert finalized(broker, capsys)["metadata.version"] == "4.3-IV0"
