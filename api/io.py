"""Bodies in and documents out: every route reads its body as raw bytes and answers with bytes.

A body is validated where it is used, once, from the bytes (:func:`controller.edge.parse`: in the route, or in a
solver worker for plans, evaluations and what-ifs). A route declares its body document with
:func:`request_body` (for OpenAPI) and its answer with ``response_model`` (for OpenAPI only: :func:`respond`
serialises the contract document itself, without revalidating what the controller built).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from controller.edge import encode

#: the request documents the routes declare (their schemas are added to the OpenAPI components)
REQUEST_DOCUMENTS: dict[str, Any] = {}


def request_body(cls: Any, required: bool = True) -> dict[str, Any]:
    """The ``openapi_extra`` of a route whose JSON body is the contract document ``cls``."""
    REQUEST_DOCUMENTS[cls.__name__] = cls
    return {"requestBody": {"required": required, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{cls.__name__}"}}}}}


#: bodies of at least this size are joined in a thread (:func:`read_body`)
JOIN_IN_THREAD_BYTES = 1 << 20


class UnsupportedMediaType(Exception):
    """A request body that is not JSON (415)."""


def is_json(content_type: str) -> bool:
    """``application/json`` or ``application/<x>+json``, with any parameters (``; charset=utf-8``)."""
    media = content_type.split(";", 1)[0].strip().lower()
    kind, _, sub = media.partition("/")
    return kind == "application" and (sub == "json" or sub.endswith("+json"))


async def read_body(request: Request, default: bytes | None = None) -> bytes:
    """The raw body of a JSON request; a declared type that is not JSON is a 415 (a missing Content-Type is
    read as JSON); an empty body is ``default`` when the body is optional."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not is_json(content_type):
        raise UnsupportedMediaType(f"unsupported media type {content_type[:100]!r}: send the body as "
                                   "application/json")
    chunks = [chunk async for chunk in request.stream()]
    # a big body is joined in a thread: bytes.join releases the GIL from 1 MiB on, so the event loop goes on
    # (joining 50 MB on the loop held it for 35-45 ms)
    big = sum(map(len, chunks)) >= JOIN_IN_THREAD_BYTES
    raw = await asyncio.to_thread(b"".join, chunks) if big else b"".join(chunks)
    if default is not None and (not raw or raw.isspace()):  # (isspace stops at the first other byte: no copy)
        return default
    return raw


#: answers of at least this size are sent in slices of :data:`SLICE_BYTES` (:func:`answer`)
STREAM_BYTES = 1 << 20
SLICE_BYTES = 256 << 10


def respond(doc: Any, status: int = 200, cls: Any = None, headers: dict[str, str] | None = None) -> Response:
    """A contract document (``cls`` for a list of them) as the JSON answer."""
    return answer(status, encode(doc, cls), headers)


def answer(status: int, body: bytes, headers: dict[str, str] | None = None) -> Response:
    """A serialised JSON answer (by :func:`respond`, or by a solver worker). One of :data:`STREAM_BYTES` or more
    goes out in slices, each a view of ``body`` written when the socket has room: written whole, the transport
    copied the unsent part of a 12 MB answer twice on the event loop (30-50 ms on a busy machine, every other
    request waiting)."""
    if len(body) < STREAM_BYTES:
        return Response(body, status_code=status, media_type="application/json", headers=headers)
    return StreamingResponse(_slices(body), status_code=status, media_type="application/json",
                             headers={**(headers or {}), "content-length": str(len(body))})


async def _slices(body: bytes) -> AsyncIterator[memoryview]:
    view = memoryview(body)
    for lo in range(0, len(view), SLICE_BYTES):
        yield view[lo:lo + SLICE_BYTES]
