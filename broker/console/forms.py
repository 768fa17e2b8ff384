"""Mutations: each form posts twice. Without ``confirm=yes`` the answer is a confirmation
(for an offset reset: the dry run's table); with it, the change is made. Both are logged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.console import actions
from broker.console.actions import ActionError
from broker.tools.client import ClientError

if TYPE_CHECKING:
    from broker.console.app import Console

MAX_TOPIC_NAME = 249


class FormError(Exception):
    pass


def _int(form: FormData, key: str, default: int | None = None) -> int:
    raw = str(form.get(key, "")).strip()
    if not raw and default is not None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise FormError(f"{key} must be a whole number") from None


def _configs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise FormError(f"config line {line.strip()!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def _topic_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_TOPIC_NAME or name in (".", ".."):
        raise FormError("a topic name has 1 to 249 characters and is not '.' or '..'")
    if any(not (c.isascii() and (c.isalnum() or c in "._-")) for c in name):
        raise FormError("a topic name uses only ASCII letters, digits, '.', '_' and '-'")
    return name


class Mutations:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.state = console.state

    async def _run(self, request: Request, action: str, target: str, summary: str,
                   fields: dict[str, str], work: Callable[[], Any], done: str, **extra: Any) -> Response:
        """Confirm first; then do ``work`` in a thread, log the outcome and say how it went."""
        form = await request.form()
        user = str(request.scope.get("console_user", "")) or "anonymous"
        if form.get("confirm") != "yes":
            return self.console.render(request, "confirm.html", summary=summary, action_url=request.url.path,
                                       fields=fields, **extra)
        try:
            await anyio.to_thread.run_sync(work)
        except (ActionError, ClientError) as ex:
            self.state.audit(user, action, target, "error", fields, error=str(ex))
            return self.console.render(request, "result.html", ok=False, message=f"{action} failed: {ex}")
        self.state.audit(user, action, target, "ok", fields)
        return self.console.render(request, "result.html", ok=True, message=done)

    async def _fail(self, request: Request, action: str, error: str) -> Response:
        user = str(request.scope.get("console_user", "")) or "anonymous"
        self.state.audit(user, action, request.url.path, "refused", error=error)
        return self.console.render(request, "result.html", status=400, ok=False, message=error)

    async def create_topic(self, request: Request) -> Response:
        form = await request.form()
        try:
            name = _topic_name(str(form.get("name", "")))
            partitions = _int(form, "partitions", -1)
            replication = _int(form, "replication_factor", -1)
            configs = _configs(str(form.get("configs", "")))
        except FormError as ex:
            return await self._fail(request, "create_topic", str(ex))
        fields = {"name": name, "partitions": str(partitions), "replication_factor": str(replication),
                  "configs": "\n".join(f"{k}={v}" for k, v in configs.items())}
        parts = "the default number of" if partitions < 0 else str(partitions)
        summary = f"Create topic '{name}' with {parts} partitions"
        summary += "" if replication < 0 else f", replication factor {replication}"
        summary += f" and configs {', '.join(fields['configs'].splitlines())}" if configs else ""
        return await self._run(
            request, "create_topic", name, summary + "?", fields,
            lambda: actions.create_topic(self.state.client, name, partitions, replication, configs),
            f"Created topic '{name}'.", link=f"/topics/{name}")

    async def delete_topic(self, request: Request) -> Response:
        name = request.path_params["name"]
        return await self._run(
            request, "delete_topic", name, f"Delete topic '{name}' and all its records? This cannot be undone.",
            {}, lambda: actions.delete_topic(self.state.client, name), f"Deleted topic '{name}'.", danger=True)

    async def add_partitions(self, request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        try:
            total = _int(form, "count")
        except FormError as ex:
            return await self._fail(request, "add_partitions", str(ex))
        try:
            # Ask the cluster, not the snapshot: the topic may be newer than the last poll.
            metadata = await anyio.to_thread.run_sync(self.state.client.metadata, [name])
            now: int | str = next((len(t.partitions) for t in metadata.topics if t.name == name), "?")
        except ClientError:
            now = "?"
        return await self._run(
            request, "add_partitions", name,
            f"Grow topic '{name}' from {now} to {total} partitions? Keyed records will map to other partitions.",
            {"count": str(total)}, lambda: actions.add_partitions(self.state.client, name, total),
            f"Topic '{name}' now has {total} partitions.")

    async def alter_config(self, request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        key = str(form.get("key", "")).strip()
        if not key:
            return await self._fail(request, "alter_config", "a config name is required")
        remove = form.get("remove") == "on"
        value = None if remove else str(form.get("value", "")).strip()
        fields = {"key": key, "value": value or ""} | ({"remove": "on"} if remove else {})
        summary = (f"Remove the override of {key} on topic '{name}' (back to the broker's value)?" if remove
                   else f"Set {key}={value} on topic '{name}'?")
        return await self._run(
            request, "alter_config", name, summary, fields,
            lambda: actions.alter_topic_config(self.state.client, name, key, value),
            f"{'Removed' if remove else 'Set'} {key} on '{name}'.")

    async def reset_offsets(self, request: Request) -> Response:
        group = request.path_params["group_id"]
        form = await request.form()
        topic = str(form.get("topic", "")).strip()
        target = str(form.get("target", ""))
        raw = str(form.get("value", "")).strip()
        if target not in actions.RESET_TARGETS or not topic:
            return await self._fail(request, "reset_offsets", "choose a topic and a target")
        try:
            if target == "offset":
                value = _int(form, "value")
            elif target == "datetime":
                from broker.console.app import _parse_time

                value = _parse_time(raw)
            else:
                value = 0
        except (FormError, ValueError) as ex:
            return await self._fail(request, "reset_offsets", str(ex))
        try:
            plan = await anyio.to_thread.run_sync(actions.plan_reset, self.state.client, group, topic, target, value)
        except (ActionError, ClientError) as ex:
            return await self._fail(request, "reset_offsets", str(ex))
        fields = {"topic": topic, "target": target, "value": raw}
        return await self._run(
            request, "reset_offsets", group,
            f"Dry run: resetting group '{group}' on '{topic}' to {target} {raw} would commit:", fields,
            lambda: actions.apply_reset(self.state.client, group, plan),
            f"Committed {len(plan)} offsets for group '{group}'.", plan=plan)


def routes(console: Console) -> list[Route]:
    m = Mutations(console)
    return [
        Route("/topics", m.create_topic, methods=["POST"]),
        Route("/topics/{name}/delete", m.delete_topic, methods=["POST"]),
        Route("/topics/{name}/partitions", m.add_partitions, methods=["POST"]),
        Route("/topics/{name}/config", m.alter_config, methods=["POST"]),
        Route("/groups/{group_id}/reset", m.reset_offsets, methods=["POST"]),
    ]
