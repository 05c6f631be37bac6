"""Dependencies shared by the routes: the controller of the running app, and the bearer scheme (documentation
only: the check itself is the :mod:`api.middleware` auth layer, which runs before any body is read)."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from controller.service import Controller

bearer = HTTPBearer(auto_error=False, description="REBALANCER_API_TOKENS, when set")


async def get_controller(request: Request) -> Controller:  # async: no threadpool hop per request
    ctl: Controller = request.app.state.controller
    return ctl


async def documented_auth(_cred: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    """Declares the bearer scheme in OpenAPI; enforcement is in the middleware."""
    return None
