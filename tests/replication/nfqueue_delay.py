"""Delay every packet of one NFQUEUE queue by a constant time, in user space: the fault suite's
delay where the kernel has no ``sch_netem`` (see :meth:`tests.replication.netns.Network.set_delay`).

    ip netns exec NS python -m tests.replication.nfqueue_delay --queue 2 --delay-ms 200

Run inside the namespace whose packets the queue receives (NFQUEUE queues are per namespace). Each
packet is held and accepted ``--delay-ms`` after it arrived, on the monotonic clock; the delay is
the same for every packet, so a FIFO keeps them in order. One thread: the queue's socket is read
without blocking whenever ``select`` says it is readable, so verdicts are never given from another
thread than the one reading. Prints ``ready queue N`` once bound. On SIGTERM (or when its parent is
gone) it accepts every packet it still holds, then exits.
"""

from __future__ import annotations

import argparse
import collections
import os
import select
import signal
import socket
import sys
import time

from netfilterqueue import COPY_META, NetfilterQueue, Packet

#: Packets the kernel holds for the queue before it drops new ones (the default is 1024; a busy
#: node sends a few thousand packets in 200 ms).
MAX_QUEUE_LEN = 10_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=int, required=True)
    args = parser.parse_args(argv)
    delay_s = args.delay_ms / 1000.0
    parent = os.getppid()

    held: collections.deque[tuple[float, Packet]] = collections.deque()
    # Packets arrive in order of their arrival here, so their due times only grow.
    queue = NetfilterQueue()
    queue.bind(args.queue, lambda packet: held.append((time.monotonic() + delay_s, packet)),
               max_len=MAX_QUEUE_LEN, mode=COPY_META)  # the verdict needs the packet's id, not its bytes
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    fd = queue.get_fd()
    print(f"ready queue {args.queue}", flush=True)
    accepted = 0
    try:
        while not stopping:
            timeout = 1.0
            if held:
                timeout = min(timeout, max(0.0, held[0][0] - time.monotonic()))
            readable, _, _ = select.select([fd, wake_r.fileno()], [], [], timeout)
            if fd in readable:
                queue.run(block=False)
            if wake_r.fileno() in readable:
                wake_r.recv(64)
            now = time.monotonic()
            while held and held[0][0] <= now:
                held.popleft()[1].accept()
                accepted += 1
            if os.getppid() != parent:  # the harness is gone (killed): do not hold its packets forever
                break
        queue.run(block=False)  # what the kernel handed over already
        accepted += len(held)
        while held:
            held.popleft()[1].accept()
    finally:
        queue.unbind()
    print(f"stopped queue {args.queue}: {accepted} packets delayed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
