"""A test module that leaves a confluent-kafka client held fails at its end, one whose client
only a reference cycle kept is warned about (tests/client_leaks.py); one that closes its
clients passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.shared import ROOT

# No broker: an unreachable bootstrap address is enough for a client to hold its threads.
CYCLES = '''
import pytest
from confluent_kafka import KafkaException, Producer

QUIET = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}

def test_a_caught_exception_keeps_the_producer():
    producer = Producer({**QUIET, "transactional.id": "t"})
    with pytest.raises(KafkaException) as caught:
        producer.init_transactions(0.01)
    assert caught.value is not None

def test_closes_its_producer():
    Producer(QUIET).close()
'''

HOLDS = '''
from confluent_kafka import Producer

PRODUCERS = []

def test_keeps_a_producer_in_a_module_global():
    PRODUCERS.append(Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0}))
'''

CLOSES = '''
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

QUIET = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}

def test_closes_every_client():
    producer = Producer(QUIET)
    consumer = Consumer({**QUIET, "group.id": "g"})
    admin = AdminClient(QUIET)
    try:
        assert admin.list_topics(timeout=0.01) is None
    except Exception:
        pass
    finally:
        producer.close()
        consumer.close()
        del admin
'''


def test_a_held_client_fails_its_module_and_a_cycle_kept_one_is_warned_about(tmp_path: Path) -> None:
    for name, source in [("test_cycles.py", CYCLES), ("test_holds.py", HOLDS), ("test_closes.py", CLOSES)]:
        (tmp_path / name).write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.client_leaks",
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "4 passed, 1 warning, 1 error" in out, out
    errors = [ln.split(" - ")[0] for ln in out.splitlines() if ln.startswith("ERROR ")]
    assert errors == ["ERROR test_holds.py::test_keeps_a_producer_in_a_module_global"], out
    assert "librdkafka clients outlived test_holds.py" in out, out
    assert "Producer held by: list" in out, out
    assert "ClientLeakWarning: only a reference cycle (a traceback holding a frame, say; freed now) or a thread's frames kept these alive at the end of test_cycles.py" in out, out
    assert "Producer held by: frame of test_a_caught_exception_keeps_the_producer" in out, out
