"""A server that does nothing: :mod:`benchmarks.bench_mixed_load` probes it beside the controller, in both phases, to
measure how much the machine alone (the CPU the heavy requests take, in other processes) slows a request.

``python -m benchmarks.bare_asgi PORT`` serves ``GET`` of any path with ``{"status":"ok"}`` under uvicorn, with the
controller's event loop and HTTP parser (``rebalancer serve``: asyncio, httptools), no middleware, no application.
"""

from __future__ import annotations

import sys
from typing import Any

BODY = b'{"status":"ok"}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def main(argv: list[str]) -> int:
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(argv[0]), log_level="warning", access_log=False, loop="asyncio",
                http="httptools", lifespan="off")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
