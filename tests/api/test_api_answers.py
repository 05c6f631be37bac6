"""Big answers leave in slices, each a view of the serialised body, with their length declared (no chunked
encoding); small ones in one message. Checked at the ASGI boundary, where the server writes what it is given."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from api.io import SLICE_BYTES, STREAM_BYTES, answer


def _messages(body: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "asgi": {"version": "3.0"}}

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)  # the client never disconnects during the answer
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(answer(200, body)(scope, receive, send))
    return sent


def _document(size: int) -> bytes:
    return json.dumps({"rows": ["x" * 90] * (size // 96)}).encode()


def test_a_big_answer_leaves_in_slices_with_its_length_declared():
    body = _document(3 * STREAM_BYTES + 12345)
    sent = _messages(body)
    start, parts = sent[0], [m for m in sent[1:] if m.get("body")]
    headers = dict(start["headers"])
    assert headers[b"content-length"] == str(len(body)).encode()
    assert b"transfer-encoding" not in headers
    assert len(parts) == -(-len(body) // SLICE_BYTES)
    assert all(len(m["body"]) <= SLICE_BYTES for m in parts)
    assert b"".join(bytes(m["body"]) for m in parts) == body
    assert json.loads(b"".join(bytes(m["body"]) for m in parts)) == json.loads(body)


def test_a_small_answer_leaves_in_one_message():
    body = _document(STREAM_BYTES // 4)
    sent = _messages(body)
    parts = [m for m in sent[1:] if m["type"] == "http.response.body"]
    assert len(parts) == 1 and parts[0]["body"] == body
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(body)).encode()



def test_a_warm_start_builds_the_route_state_of_every_router_before_the_first_request(tmp_path):
    """FastAPI builds a router's route state (a validator per route) on the first request that walks past it:
    100-200 ms on the event loop, every other request waiting. A warm start (``rebalancer serve``) builds it first;
    a cold one (the in-process test apps) leaves it to the first request."""
    from fastapi.routing import _IncludedRouter

    from api.app import create_app
    from controller.settings import Settings

    async def built(warm: bool) -> list[bool]:
        app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/{warm}.db", solver_workers=1), warm=warm)
        async with app.router.lifespan_context(app):
            routers = [r for r in app.router.routes if isinstance(r, _IncludedRouter)]
            return [r._effective_candidates_version is not None for r in routers]

    warm = asyncio.run(built(True))
    assert len(warm) >= 3 and all(warm), warm
    assert not any(asyncio.run(built(False)))
