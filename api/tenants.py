"""Scoped tokens: a token bound to job-id prefixes with read or write rights; admin for the rest.

``REBALANCER_API_TOKENS`` are admin tokens (everything, as before). ``REBALANCER_TOKEN_SCOPES`` adds scoped ones,
as JSON: ``{"tok-a": {"prefixes": ["tenant-a."], "access": "write"}, "tok-r": {"prefixes": ["tenant-a."],
"access": "read"}}`` (``access``: ``read``, ``write`` or ``admin``). A scoped token

* sees only the jobs whose id starts with one of its prefixes: another tenant's job answers **404** with the body
  an unknown job gets (so job names do not leak), ``GET /v1/jobs`` lists only its own;
* with ``read``: only ``GET`` (jobs, proposals, history, ``/v1/algorithms``); anything else is 403;
* with ``write``: everything on its jobs (registering one outside its prefixes is 403, whether it exists or not)
  and the stateless planning routes;
* never ``/metrics`` (its per-job series name every job): 403.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Access = Literal["read", "write", "admin"]
JOBS = "/v1/jobs"


@dataclass(frozen=True)
class Grant:
    access: Access
    prefixes: tuple[str, ...] = ()

    @property
    def admin(self) -> bool:
        return self.access == "admin"

    def sees(self, job_id: str) -> bool:
        return self.admin or job_id.startswith(self.prefixes)


ADMIN = Grant("admin")


def decide(grant: Grant, method: str, path: str) -> tuple[int, Any] | None:
    """None when ``grant`` may make this request; else the (status, body) to answer instead."""
    if grant.admin:
        return None
    if path == "/metrics":
        return 403, {"detail": "forbidden: /metrics needs an admin token"}
    if grant.access == "read" and method not in ("GET", "HEAD"):
        return 403, {"detail": f"forbidden: this token is read-only ({method} {path})"}
    if path.startswith(JOBS + "/"):
        job_id = path[len(JOBS) + 1:].split("/", 1)[0]
        if job_id and not grant.sees(job_id):
            if method == "PUT" and path.rstrip("/") == f"{JOBS}/{job_id}":
                return 403, {"detail": f"forbidden: this token registers only jobs whose id starts with "
                                       f"{' or '.join(repr(p) for p in grant.prefixes) or '(no prefix)'}"}
            return 404, {"detail": f"unknown job {job_id!r}"}
    return None


def filter_job_list(grant: Grant, body: bytes) -> bytes:
    """``GET /v1/jobs`` for a scoped token: only the jobs it sees."""
    doc = json.loads(body)
    if isinstance(doc, list):
        doc = [j for j in doc if isinstance(j, dict) and grant.sees(str(j.get("job_id", "")))]
    return json.dumps(doc).encode()


def grants(admin_tokens: set[str], scoped: dict[str, Any]) -> dict[bytes, Grant]:
    """Token bytes -> grant, from the settings."""
    out = {t.encode(): ADMIN for t in admin_tokens}
    for token, sc in scoped.items():
        out[token.encode()] = Grant(sc.access, tuple(sc.prefixes))
    return out
