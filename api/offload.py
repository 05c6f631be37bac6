"""Big plan requests handled entirely in a solver worker, so the event loop only moves bytes (issue 12 item 8).

Parsing, validating and converting a 50 MB problem document holds the GIL for tens of seconds (``json.loads``,
pydantic, ``Problem.from_dict``): in a thread it would stall ``/healthz`` and every statistics post just the same.
So ``POST /v1/plans`` bodies of at least ``REBALANCER_OFFLOAD_MIN_BYTES`` are read by :class:`OffloadMiddleware`
and sent as raw bytes to a worker, which counts the key groups, edges and nodes **before** building any model
(413), validates with the route's own schema (:class:`api.schemas.PlanRequest`, the same 422 body), converts,
checks the planner and its parameters, solves under the capped time limit and serialises the response with the
route's response model (:class:`api.schemas.PlanDoc`). The answer is byte-for-byte the route's (tested). The
worker's kill deadline adds ``REBALANCER_OFFLOAD_SECONDS_PER_MB`` per MB of body for the parsing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from controller.errors import Busy

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PATH = "/v1/plans"


def _json(status: int, doc: Any) -> tuple[str, int, bytes, str | None, str | None]:
    return ("response", status, json.dumps(doc).encode(), None, None)


def plan_task(raw: bytes, caps: dict[str, int], default_algorithm: str, max_time_limit: float) -> tuple[Any, ...]:
    """Worker side of ``POST /v1/plans``: ``("response", status, body bytes, algorithm, solver status)``."""
    from pydantic import TypeAdapter, ValidationError

    from api.errors import pydantic_errors
    from api.schemas import PlanDoc, PlanRequest
    from solvers import registry
    from solvers.documents import plan_to_dict, problem_from_dict
    from solvers.errors import InvalidInput

    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return _json(422, {"detail": [{"field": "body", "reason": "invalid JSON: JSON decode error"}]})
    problem = doc.get("problem") if isinstance(doc, dict) else None
    if isinstance(problem, dict):  # counted before any model is built
        for key, cap, what in (("key_groups", caps["max_key_groups"], "key groups"),
                               ("communication", caps["max_edges"], "edges"), ("nodes", caps["max_nodes"], "nodes")):
            items = problem.get(key)
            if isinstance(items, list) and len(items) > cap:
                return _json(413, {"detail": f"request too large: problem.{key}: more than {cap} {what}"})
    try:
        req = PlanRequest.model_validate(doc, from_attributes=True)  # as FastAPI validates a body
    except ValidationError as exc:
        return _json(422, {"detail": pydantic_errors([dict(e) for e in exc.errors()])})
    del doc, problem
    try:
        prob = problem_from_dict(req.problem)  # SkipValidation: decoded JSON, checked once here
    except InvalidInput as exc:
        return _json(422, {"detail": [{"field": f"problem.{exc.field}" if exc.field else "problem",
                                       "reason": exc.reason}]})
    name = req.algorithm or default_algorithm
    try:
        algo = registry.get(name)
    except InvalidInput as exc:
        return _json(422, {"detail": [{"field": "algorithm", "reason": exc.reason}]})
    try:
        algo.validate(req.params or {})
        plan = registry.solve(name, prob, time_limit=min(req.time_limit_s, max_time_limit), **(req.params or {}))
    except InvalidInput as exc:
        return _json(422, {"detail": [{"field": exc.field or "params", "reason": exc.reason}]})
    except Exception as exc:  # a planner bug: the route answers 500 "planner failed" too
        return _json(500, {"detail": f"planner failed: {type(exc).__name__}: {exc}"})
    out = plan_to_dict(prob, plan)
    ta = TypeAdapter(PlanDoc)
    body = ta.dump_json(ta.validate_python(out), by_alias=True)
    return ("response", 200, body, name, str(out["solver"]["status"]))


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


class OffloadMiddleware:
    """Sits inside the body-size limit; everything but big ``POST /v1/plans`` bodies passes through untouched."""

    def __init__(self, app: Any, controller: Any, min_bytes: int, seconds_per_mb: float):
        self.app, self.ctl, self.min_bytes, self.seconds_per_mb = app, controller, min_bytes, seconds_per_mb

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        ctype = headers.get(b"content-type", b"application/json").split(b";")[0].strip().lower()
        if ctype != b"application/json":
            await self.app(scope, receive, send)
            return
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) < self.min_bytes:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        try:
            while more:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return None
                chunks.append(msg.get("body", b""))
                more = bool(msg.get("more_body", False))
        except Exception as exc:  # the body limit's 413 while streaming a chunked body
            status = int(getattr(exc, "status_code", 0) or 0)
            if status != 413:
                raise
            return await _answer(send, 413, json.dumps({"detail": getattr(exc, "detail", "too large")}).encode())
        raw = b"".join(chunks)
        del chunks
        if len(raw) < self.min_bytes:  # small after all (chunked): replay it to the route
            await self.app(scope, _replay(raw, receive), send)
            return
        scope["route"] = SimpleNamespace(path=PATH)  # the metrics middleware labels the request with the route
        await self._plan(raw, send)
        return None

    async def _plan(self, raw: bytes, send: Send) -> None:
        ctl, s = self.ctl, self.ctl.settings
        try:
            ctl.pool.check_admission(1)
        except Busy as exc:
            return await _answer(send, 429, json.dumps({"detail": str(exc)}).encode(), [(b"retry-after", b"1")])
        caps = {"max_key_groups": s.max_key_groups, "max_edges": s.max_edges, "max_nodes": s.max_nodes}
        budget = s.max_time_limit_s + self.seconds_per_mb * len(raw) / 1e6
        t0 = time.perf_counter()
        try:
            out = await ctl.pool.submit(plan_task, raw, caps, ctl.default_algorithm(), s.max_time_limit_s,
                                        admit=False, time_limit=budget, raw=True)
        except RuntimeError as exc:  # the worker was killed (time limit) or died
            return await _answer(send, 500, json.dumps({"detail": f"planner failed: {exc}"}).encode())
        if out[0] != "response":  # the task itself failed (a bug): the route would answer 500 too
            return await _answer(send, 500, json.dumps({"detail": f"planner failed: {out[-1]}"}).encode())
        _, status, body, name, solver_status = out
        if name is not None:
            ctl.telemetry.solve_seconds.observe(time.perf_counter() - t0, name)
            ctl.telemetry.plans.inc(name, solver_status)
        return await _answer(send, status, body)


def _replay(raw: bytes, receive: Receive) -> Receive:
    """The body already read, then the connection's own messages (a disconnect, when it comes)."""
    sent = [False]

    async def replay() -> Message:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replay
