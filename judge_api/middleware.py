"""ASGI middleware that guards every request before a route sees it: the body size limit and the NUL guard on the
path and query string."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from judge_api.config import get_settings


async def _send_json(
    send: Send, status_code: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class BodySizeLimit:
    """413 for bodies over DJ_MAX_BODY_BYTES: by Content-Length up front, and by counting the bytes actually
    received (a chunked body has no Content-Length), so no route ever reads more than the limit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = get_settings().max_body_bytes
        message = f"request body exceeds the limit of {limit} bytes (DJ_MAX_BODY_BYTES)"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                if not value.isdigit():
                    await _send_json(send, 400, {"detail": "the Content-Length header is not a number"})
                    return
                if int(value) > limit:
                    await _send_json(
                        send,
                        413,
                        {
                            "detail": f"request body of {int(value)} bytes exceeds the "
                            f"limit of {limit} bytes (DJ_MAX_BODY_BYTES)"
                        },
                    )
                    return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > limit:
                    raise HTTPException(413, message)
            return event

        await self.app(scope, limited_receive, send)


class InputGuard:
    """422 for a NUL character in the path or a query parameter (databases cannot store or compare it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem: list[str | int] | None = None
            if "\x00" in scope.get("path", ""):
                problem = ["path"]
            else:
                raw = scope.get("query_string", b"").decode("latin-1")
                if "%00" in raw or "\x00" in raw:
                    pairs = parse_qsl(raw, keep_blank_values=True, encoding="utf-8", errors="replace")
                    for name, value in pairs:
                        if "\x00" in name or "\x00" in value:
                            problem = ["query", name.replace("\x00", "\\u0000")]
                            break
            if problem is not None:
                error = {
                    "loc": problem,
                    "msg": "contains a NUL character (\\u0000), which is not allowed",
                    "type": "value_error",
                }
                await _send_json(send, 422, {"detail": [error]})
                return
        await self.app(scope, receive, send)
