"""Tests that order requests precisely (races) or restart the controller on one database: an in-process server
(:class:`tests.helpers.server.InProcessServer`) and an ``httpx.AsyncClient`` on its own event loop, so that a
test can hold a job's lock between two requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from controller.service import Controller
from controller.settings import Settings
from tests.helpers.server import InProcessServer


def run(db: Path, fn: Callable[[httpx.AsyncClient, Controller], Awaitable[Any]], **caps: Any) -> Any:
    """Start a server on the SQLite file ``db`` with the settings ``caps``, return ``await fn(client, controller)``
    (run on the server's loop) and stop the server."""
    known = {k: v for k, v in caps.items() if k in Settings.model_fields}
    srv = InProcessServer(database_url=f"sqlite:///{db}", warm=False, **known)
    for name, value in caps.items():  # settings that controller/settings.py does not declare yet (read by getattr)
        if name not in known:
            object.__setattr__(srv.controller.settings, name, value)
    with srv.start():

        async def main() -> Any:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=srv.app), base_url=srv.url,
                                         timeout=60) as c:
                return await fn(c, srv.controller)

        return srv.run(main())


async def settle(ctl: Controller, job_id: str) -> None:
    """Wait (on the server's loop) until the job's automatic round, if one is being solved, has ended."""
    job = ctl.ctx.jobs.get(job_id)
    task = None if job is None else job.round
    if task is not None:
        await asyncio.wait({task})


async def propose(c: httpx.AsyncClient, job_id: str, timeout: float = 120.0) -> dict[str, Any]:
    """A proposal of ``job_id``, once decided: the POST waits up to 30 s, then its ``Location`` is polled (a loaded
    machine may take longer to start the solver worker; a test must not depend on how fast that is)."""
    r = await c.post(f"/v1/jobs/{job_id}/proposals", json={"wait_s": 30})
    assert r.status_code in (201, 202), r.text
    doc: dict[str, Any] = r.json()
    deadline = asyncio.get_running_loop().time() + timeout
    while doc["status"] == "pending":
        assert asyncio.get_running_loop().time() < deadline, f"proposal still pending after {timeout} s: {doc}"
        await asyncio.sleep(0.05)
        doc = (await c.get(f"/v1/jobs/{job_id}/proposals/{doc['id']}")).json()
    return doc


def stats(batch_id: int, kgs: list[str], epoch: int = 0, load: float = 1.0) -> dict[str, Any]:
    return {"batch_id": batch_id, "epoch": epoch,
            "key_groups": [{"id": k, "load": load * (5.0 if i == 0 else 1.0)} for i, k in enumerate(kgs)]}
