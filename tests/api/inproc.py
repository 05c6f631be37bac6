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


def stats(batch_id: int, kgs: list[str], epoch: int = 0, load: float = 1.0) -> dict[str, Any]:
    return {"batch_id": batch_id, "epoch": epoch,
            "key_groups": [{"id": k, "load": load * (5.0 if i == 0 else 1.0)} for i, k in enumerate(kgs)]}
