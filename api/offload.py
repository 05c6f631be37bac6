"""Big plan and evaluation requests handled entirely in a solver worker: the event loop only moves bytes (issue 12
item 8).

Parsing, validating and converting a 50 MB problem document holds the GIL for tens of seconds (``json.loads``,
pydantic, ``Problem.from_dict``): in a thread it would stall ``/healthz`` and every statistics post just the same.
So ``POST /v1/plans`` bodies of at least ``REBALANCER_OFFLOAD_MIN_BYTES`` are read by :class:`OffloadMiddleware`
and sent as raw bytes to a worker, which counts the key groups, edges and nodes **before** building any model
(413), validates with the route's own schema (:class:`api.schemas.PlanRequest`, the same 422 body), converts,
checks the planner and its parameters, solves under the capped time limit and serialises the response with the
route's response model (:class:`api.schemas.PlanDoc`). The answer is byte-for-byte the route's (tested). The
worker's kill deadline adds ``REBALANCER_OFFLOAD_SECONDS_PER_MB`` per MB of body for the parsing.
``POST /v1/evaluate`` the same way (:func:`solvers.documents.evaluation`, the controller's evaluation); it holds
one ad-hoc solve slot while it runs in a worker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from api.errors import client_error, solver_unavailable
from controller.errors import Busy, TooLarge
from controller.planning import Caps, check_algorithm, check_problem_size, evaluation, problem_from_doc
from controller.solving import SolveTimeout, WorkerDied
from solvers.errors import InvalidInput

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PATH = "/v1/plans"
EVALUATE = "/v1/evaluate"


def _json(status: int, doc: Any) -> tuple[str, int, bytes, str | None, str | None]:
    return ("response", status, json.dumps(doc).encode(), None, None)


def _request(raw: bytes, model: Any, caps: Caps) -> Any:
    """The body decoded and validated as FastAPI does for the route (``model``), after the size caps (413) are
    checked on the decoded JSON; a ready error response instead when any of it fails."""
    from pydantic import ValidationError

    from api.errors import pydantic_errors

    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return _json(422, {"detail": [{"field": "body", "reason": "invalid JSON: JSON decode error"}]})
    try:
        check_problem_size(doc.get("problem") if isinstance(doc, dict) else None, caps)
        return model.model_validate(doc, from_attributes=True)
    except TooLarge as exc:
        return _json(*client_error(exc))
    except ValidationError as exc:
        return _json(422, {"detail": pydantic_errors([dict(e) for e in exc.errors()])})


def _response(model: Any, out: Any) -> bytes:
    from pydantic import TypeAdapter

    ta = TypeAdapter(model)
    return ta.dump_json(ta.validate_python(out), by_alias=True)


def plan_task(raw: bytes, caps: Caps, default_algorithm: str, max_time_limit: float) -> tuple[Any, ...]:
    """Worker side of ``POST /v1/plans``: ``("response", status, body bytes, algorithm, solver status)``; the
    route's steps (:mod:`controller.planning`'s checks, the worker's solve), run here."""
    from api.schemas import PlanDoc, PlanRequest
    from controller.solver_worker import solve_document

    req = _request(raw, PlanRequest, caps)
    if isinstance(req, tuple):
        return req
    try:
        prob = problem_from_doc(req.problem, caps)
        name, params = check_algorithm(req.algorithm or default_algorithm, req.params)
        out = solve_document(name, prob, min(req.time_limit_s, max_time_limit), params)
    except (InvalidInput, TooLarge) as exc:
        return _json(*client_error(exc))
    except Exception as exc:  # a planner bug: the route answers 500 "planner failed" too
        return _json(500, {"detail": f"planner failed: {type(exc).__name__}: {exc}"})
    return ("response", 200, _response(PlanDoc, out), name, str(out["solver"]["status"]))


def evaluate_task(raw: bytes, caps: Caps) -> tuple[Any, ...]:
    """Worker side of ``POST /v1/evaluate``: ``("response", status, body bytes, None, None)``."""
    from api.schemas import EvaluateRequest, EvaluateResponse

    req = _request(raw, EvaluateRequest, caps)
    if isinstance(req, tuple):
        return req
    try:
        out = evaluation(problem_from_doc(req.problem, caps), req.plan)
    except (InvalidInput, TooLarge) as exc:
        return _json(*client_error(exc))
    return ("response", 200, _response(EvaluateResponse, out), None, None)


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


class OffloadMiddleware:
    """Sits inside the body-size limit; everything but big ``POST /v1/plans`` and ``/v1/evaluate`` bodies passes
    through untouched."""

    def __init__(self, app: Any, controller: Any, min_bytes: int, seconds_per_mb: float):
        self.app, self.ctl, self.min_bytes, self.seconds_per_mb = app, controller, min_bytes, seconds_per_mb

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in (PATH, EVALUATE):
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
        scope["route"] = SimpleNamespace(path=scope["path"])  # the metrics middleware labels it with the route
        await self._offload(scope["path"], raw, send)
        return None

    async def _offload(self, path: str, raw: bytes, send: Send) -> None:
        ctl, s = self.ctl, self.ctl.settings
        try:
            ctl.pool.check_admission(1)
        except Busy as exc:
            return await _answer(send, 429, json.dumps({"detail": str(exc)}).encode(), [(b"retry-after", b"1")])
        caps = ctl.planning.caps
        budget = s.max_time_limit_s + self.seconds_per_mb * len(raw) / 1e6
        t0 = time.perf_counter()
        try:
            if path == EVALUATE:
                out = await ctl.pool.submit(evaluate_task, raw, caps, admit=False, time_limit=budget, raw=True)
            else:
                out = await ctl.pool.submit(plan_task, raw, caps, ctl.default_algorithm(), s.max_time_limit_s,
                                            admit=False, time_limit=budget, raw=True)
        except (SolveTimeout, WorkerDied) as exc:  # the worker was killed (hard deadline) or died: 503, as the routes
            r = solver_unavailable(None, exc)
            return await _answer(send, 503, bytes(r.body), [(b"retry-after", b"1")])
        except RuntimeError as exc:
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
