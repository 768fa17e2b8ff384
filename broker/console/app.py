"""The console's web application (Starlette): pages, fragments, live events, login.

Pages are rendered from the newest snapshot with Jinja2. Their live parts are
fragments that htmx fetches again whenever the ``/events`` stream (server-sent
events) announces a new snapshot. Mutations live in :mod:`broker.console.forms`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from jinja2 import Environment, PackageLoader, select_autoescape
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from broker.console import access_pages, forms
from broker.console.actions import ActionError, describe_topic_configs
from broker.console.auth import is_loopback
from broker.console.charts import human, line_chart
from broker.console.messages import MAX_PAGE_SIZE, Query, Start, View, read_page
from broker.console.snapshot import Snapshot
from broker.console.state import ConsoleState
from broker.tools.client import ClientError

STATIC_DIR = Path(__file__).parent / "static"
#: Rows of the topics list per page: enough to scan, few enough for a browser to lay out at once.
ROWS_PER_PAGE = 200
#: The SSE stream says it is alive this often, so proxies and browsers keep it open.
PING_S = 15


def _time(ms: int | None) -> str:
    if not ms or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    for limit, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if value >= limit:
            return f"{value / limit:.1f} {suffix}"
    return f"{value} B"


def make_templates() -> Environment:
    env = Environment(loader=PackageLoader("broker.console", "templates"), autoescape=select_autoescape(),
                      trim_blocks=True, lstrip_blocks=True, auto_reload=False)
    env.filters.update(time=_time, size=_size, human=human, dash=lambda v: "-" if v is None or v == "" else v)
    env.globals.update(line_chart=line_chart, max_page_size=MAX_PAGE_SIZE)
    return env


class Console:
    def __init__(self, state: ConsoleState) -> None:
        self.state = state
        self.templates = make_templates()

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        started = time.perf_counter()
        html = self.templates.get_template(template).render(
            snap=self.state.snapshot, user=request.scope.get("console_user", ""),
            login=self.state.authenticator is not None, path=request.url.path, **context)
        elapsed_ms = (time.perf_counter() - started) * 1000
        # The render time, for browsers' developer tools and the speed test.
        return HTMLResponse(html, status_code=status, headers={"Server-Timing": f"render;dur={elapsed_ms:.1f}"})

    @property
    def snap(self) -> Snapshot:
        return self.state.snapshot

    # ------------------------------------------------------------ pages

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/cluster", status_code=302)

    async def cluster(self, request: Request) -> Response:
        part = request.url.path.startswith("/part/")
        return self.render(request, "cluster_part.html" if part else "cluster.html",
                           history=self.state.collector.history)

    async def topics(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        internal = request.query_params.get("internal") == "on"
        matching = [t for t in self.snap.topics.values()
                    if (not query or query.lower() in t.name.lower()) and (internal or not t.internal)]
        pages = max(1, -(-len(matching) // ROWS_PER_PAGE))
        try:
            page = min(max(int(request.query_params.get("page", "0") or 0), 0), pages - 1)
        except ValueError:
            page = 0
        shown = matching[page * ROWS_PER_PAGE:(page + 1) * ROWS_PER_PAGE]
        part = request.url.path.startswith("/part/")
        return self.render(request, "topics_part.html" if part else "topics.html", q=query, internal=internal,
                           shown=shown, matching=len(matching), page=page, pages=pages,
                           first_row=page * ROWS_PER_PAGE)

    async def topic(self, request: Request) -> Response:
        name = request.path_params["name"]
        topic = self.snap.topics.get(name)
        if request.url.path.startswith("/part/"):
            return self.render(request, "topic_part.html", topic=topic, name=name)
        configs, config_error = [], None
        try:
            configs = await anyio.to_thread.run_sync(describe_topic_configs, self.state.client, name)
        except (ClientError, ActionError) as ex:
            config_error = str(ex)
        status = 200 if topic is not None or configs else 404
        return self.render(request, "topic.html", status=status, topic=topic, name=name, configs=configs,
                           config_error=config_error)

    async def messages(self, request: Request) -> Response:
        params = request.query_params
        name = request.path_params["name"]
        try:
            query = Query(
                topic=name, partition=int(params.get("partition", "0") or 0),
                start=Start(params.get("start", Start.NEWEST.value)),
                offset=int(params.get("offset", "0") or 0),
                time_ms=_parse_time(params.get("time", "")),
                key_filter=params.get("key", ""),
                page_size=int(params.get("size", "50") or 50),
                view=View(params.get("view", View.AUTO.value)))
        except ValueError as ex:
            return self.render(request, "messages_part.html", status=400, page=None, error=f"bad query: {ex}")
        try:
            page = await anyio.to_thread.run_sync(read_page, self.state.client, query)
        except ClientError as ex:
            return self.render(request, "messages_part.html", page=None, error=str(ex), query=query)
        return self.render(request, "messages_part.html", page=page, error=page.error, query=query)

    async def groups(self, request: Request) -> Response:
        part = request.url.path.startswith("/part/")
        query = request.query_params.get("q", "").strip()
        shown = [g for g in self.snap.groups.values() if not query or query.lower() in g.group_id.lower()]
        return self.render(request, "groups_part.html" if part else "groups.html", q=query, shown=shown)

    async def group(self, request: Request) -> Response:
        group_id = request.path_params["group_id"]
        group = self.snap.groups.get(group_id)
        part = request.url.path.startswith("/part/")
        lag = self.state.collector.history.get("lag:" + group_id)
        return self.render(request, "group_part.html" if part else "group.html",
                           status=200 if group is not None or part else 404, group=group, group_id=group_id,
                           lag_history=lag)

    async def transactions(self, request: Request) -> Response:
        part = request.url.path.startswith("/part/")
        now_ms = int(time.time() * 1000)
        return self.render(request, "transactions_part.html" if part else "transactions.html", now_ms=now_ms)

    async def events(self, request: Request) -> Response:
        async def stream() -> AsyncIterator[dict[str, str]]:
            seen = self.snap.generation
            while True:
                if self.snap.generation != seen:
                    seen = self.snap.generation
                    yield {"event": "snapshot", "data": str(seen)}
                await self.state.changed.wait()

        return EventSourceResponse(stream(), ping=PING_S)

    # ------------------------------------------------------------ login

    async def login_form(self, request: Request) -> Response:
        return self.render(request, "login.html", error=None, next=request.query_params.get("next", "/cluster"))

    async def login(self, request: Request) -> Response:
        form = await request.form()
        name, password = str(form.get("username", "")), str(form.get("password", ""))
        target = str(form.get("next", "/cluster"))
        if not target.startswith("/") or target.startswith("//"):
            target = "/cluster"
        auth = self.state.authenticator
        ok = auth is not None and await anyio.to_thread.run_sync(auth.check, name, password)
        self.state.audit(name, "login", "console", "ok" if ok else "refused")
        if not ok:
            return self.render(request, "login.html", status=401, error="Wrong user name or password.", next=target)
        request.session["user"] = name
        return RedirectResponse(target, status_code=303)

    async def logout(self, request: Request) -> Response:
        request.session.clear()
        return RedirectResponse("/login", status_code=303)


def _parse_time(value: str) -> int:
    """A ``datetime-local`` value (taken as UTC), or milliseconds since the epoch."""
    if not value:
        return 0
    if value.isdigit():
        return int(value)
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


class RequestGuard(BaseHTTPMiddleware):
    """Cross-site and DNS-rebinding defences, for a console that may sit on a desktop's loopback.

    On loopback, the ``Host`` header must name loopback (a rebound DNS name is refused).
    A POST whose ``Origin`` is another site is refused, and a change (any POST but login and
    logout) must carry htmx's ``HX-Request`` header, which a cross-site form cannot send.
    """

    PLAIN_FORMS = ("/login", "/logout")

    def __init__(self, app: Any, loopback_only: bool) -> None:
        super().__init__(app)
        self.loopback_only = loopback_only

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        host = request.headers.get("host", "")
        if self.loopback_only and not is_loopback(_hostname(host)):
            return Response("unexpected Host header", status_code=421)
        if request.method == "POST":
            origin = request.headers.get("origin")
            if origin is not None and origin != "null" and urlsplit(origin).netloc != host:
                return Response("cross-site request refused", status_code=403)
            if request.url.path not in self.PLAIN_FORMS and request.headers.get("hx-request") != "true":
                return Response("changes are made from the console's pages only", status_code=403)
        return await call_next(request)


def _hostname(host_header: str) -> str:
    """The host of a ``Host`` header, without its port (``[::1]:9021`` gives ``::1``)."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    return host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header


class LoginRequired(BaseHTTPMiddleware):
    """Everything but the login page and static files needs a signed-in user."""

    OPEN = ("/login", "/static/")

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        user = request.session.get("user")
        if user:
            request.scope["console_user"] = user
            return await call_next(request)
        if request.url.path.startswith(self.OPEN):
            return await call_next(request)
        if request.method == "GET" and not request.headers.get("HX-Request"):
            return RedirectResponse(f"/login?next={request.url.path}", status_code=303)
        return Response("login required", status_code=401)


def create_app(state: ConsoleState, *, poll: bool = True, on_ready: Callable[[], None] | None = None,
               loopback_only: bool = True) -> Starlette:
    console = Console(state)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            if poll:
                await state.poll_once()
                tg.start_soon(state.poll_forever)
            if on_ready is not None:
                on_ready()
            yield
            tg.cancel_scope.cancel()
        state.client.close()

    routes = [
        Route("/", console.home),
        Route("/cluster", console.cluster), Route("/part/cluster", console.cluster),
        Route("/topics", console.topics), Route("/part/topics", console.topics),
        Route("/topics/{name}", console.topic), Route("/part/topics/{name}", console.topic),
        Route("/topics/{name}/messages", console.messages),
        Route("/groups", console.groups), Route("/part/groups", console.groups),
        Route("/groups/{group_id}", console.group), Route("/part/groups/{group_id}", console.group),
        Route("/transactions", console.transactions), Route("/part/transactions", console.transactions),
        Route("/events", console.events),
        Route("/login", console.login_form, methods=["GET"]), Route("/login", console.login, methods=["POST"]),
        Route("/logout", console.logout, methods=["POST"]),
        *forms.routes(console),
        *access_pages.routes(console),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    middleware = [Middleware(RequestGuard, loopback_only=loopback_only)]
    if state.authenticator is not None:
        middleware += [
            Middleware(SessionMiddleware, secret_key=secrets.token_urlsafe(32), same_site="strict",
                       session_cookie="cormorant_console"),
            Middleware(LoginRequired),
        ]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
