"""The app in this process (``httpx.ASGITransport``): for tests that need to order requests precisely (races) or
to restart the controller on the same database quickly."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from api.app import create_app
from controller.service import Controller
from controller.settings import Settings


def settings(db: Path, **caps: Any) -> Settings:
    s = Settings(database_url=f"sqlite:///{db}", solver_workers=1, max_time_limit_s=2, request_wait_s=60)
    for name, value in caps.items():  # caps that settings.py may not declare yet (read with getattr)
        if name in Settings.model_fields:
            setattr(s, name, value)
        else:
            object.__setattr__(s, name, value)
    return s


@contextlib.asynccontextmanager
async def app_client(s: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Controller]]:
    app = create_app(s, warm=False)
    ctl: Controller = app.state.controller
    await ctl.start(warm=False)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test",
                                     timeout=60) as c:
            yield c, ctl
    finally:
        await ctl.close()


def stats(batch_id: int, kgs: list[str], epoch: int = 0, load: float = 1.0) -> dict[str, Any]:
    return {"batch_id": batch_id, "epoch": epoch,
            "key_groups": [{"id": k, "load": load * (5.0 if i == 0 else 1.0)} for i, k in enumerate(kgs)]}
