"""``cormorant console --bootstrap-server H:P``: serve the web console (uvicorn).

It listens on 127.0.0.1:9021 unless ``--bind``/``--port`` say otherwise; on any
address but loopback it needs ``--users FILE`` with at least one user
(``--add-user NAME`` adds one). Once listening it prints
``cormorant console ready url=http://HOST:PORT/`` on standard output.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from broker.console.state import ConsoleState

P = TypeVar("P", bound=argparse.ArgumentParser)

EXIT_CONFIG = 2
DEFAULT_PORT = 9021


def add_parser(sub: argparse._SubParsersAction[P]) -> P:
    p = sub.add_parser("console", help="serve a web console for a Kafka-compatible cluster")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="host:port[,host:port...]")
    p.add_argument("--command-config", type=Path, help="client properties (client.id, request.timeout.ms, security.protocol, "
                                                                 "ssl.*, sasl.mechanism, sasl.jaas.config)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (a login is needed off loopback)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP port (0 picks a free one)")
    p.add_argument("--metrics-url", action="append", default=[],
                   help="a broker's Prometheus /metrics URL, for rate and latency charts (repeatable)")
    p.add_argument("--refresh", type=float, default=2.0, help="seconds between polls of the cluster")
    p.add_argument("--users", type=Path, help="the console's users file (name:scrypt hash lines)")
    p.add_argument("--add-user", metavar="NAME", help="add or replace a user in --users (password on stdin) and exit")
    return p


def missing_dependencies() -> list[str]:
    """The console's extra packages that are not installed (``pip install 'cormorant[console]'``)."""
    import importlib.util

    wanted = ("starlette", "uvicorn", "sse_starlette", "multipart", "itsdangerous", "jinja2")
    return [name for name in wanted if importlib.util.find_spec(name) is None]


def run_console(args: argparse.Namespace) -> int:
    missing = missing_dependencies()
    if missing:
        print(f"cormorant console: missing {', '.join(missing)}: pip install 'cormorant[console]'", file=sys.stderr)
        return EXIT_CONFIG
    from broker.console.auth import Authenticator, UsersError, add_user, is_loopback, load_users

    if args.add_user:
        if args.users is None:
            print("cormorant console: --add-user needs --users FILE", file=sys.stderr)
            return EXIT_CONFIG
        password = getpass.getpass("Password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
        try:
            add_user(args.users, args.add_user, password)
        except UsersError as ex:
            print(f"cormorant console: {ex}", file=sys.stderr)
            return EXIT_CONFIG
        print(f"user {args.add_user} saved in {args.users}")
        return 0
    if args.refresh <= 0:
        print("cormorant console: --refresh must be positive", file=sys.stderr)
        return EXIT_CONFIG
    authenticator = None
    try:
        users = load_users(args.users) if args.users is not None else {}
    except UsersError as ex:
        print(f"cormorant console: {ex}", file=sys.stderr)
        return EXIT_CONFIG
    if users:
        authenticator = Authenticator(users)
    elif not is_loopback(args.bind):
        print(f"cormorant console: listening on {args.bind} needs a login: create users with "
              "--users FILE --add-user NAME", file=sys.stderr)
        return EXIT_CONFIG

    from broker.console.collect import Collector
    from broker.console.kafka import ClusterClient, ConsoleConfigError, load_client_properties
    from broker.console.metrics_source import MetricsScraper
    from broker.console.state import ConsoleState
    from broker.observability.logging_setup import configure_logging

    try:
        settings = load_client_properties(Path(args.command_config) if args.command_config else None)
        client = ClusterClient(args.bootstrap_server, settings)
    except (ConsoleConfigError, OSError) as ex:
        print(f"cormorant console: {ex}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging("console")
    scraper = MetricsScraper(list(args.metrics_url)) if args.metrics_url else None
    state = ConsoleState(client=client, collector=Collector(client, scraper), refresh_s=args.refresh,
                         authenticator=authenticator)
    try:
        sock = socket.create_server((args.bind, args.port))
    except OSError as ex:
        print(f"cormorant console: cannot listen on {args.bind}:{args.port}: {ex.strerror}", file=sys.stderr)
        return EXIT_CONFIG
    return serve(state, sock, loopback_only=is_loopback(args.bind))


def serve(state: ConsoleState, sock: socket.socket, *, loopback_only: bool) -> int:
    import uvicorn

    from broker.console.app import create_app

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host

    def ready() -> None:
        # The socket already listens; this runs after the first poll, so the first page has data.
        print(f"cormorant console ready url=http://{shown}:{port}/", flush=True)

    config = uvicorn.Config(create_app(state, on_ready=ready, loopback_only=loopback_only), log_level="warning", access_log=False,
                            lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return 0
