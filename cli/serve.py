"""``rebalancer serve``: start the controller with uvicorn.

``rebalancer serve [--host H] [--port P] [--database URL]``; without ``--database`` the URL comes from
``REBALANCER_DATABASE_URL``, else SQLite at ``./data/rebalancer.db`` (WAL). Other settings come from the
environment (``REBALANCER_*``, see controller/settings.py).
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start the controller (FastAPI + uvicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--database", default=None,
                   help="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db (default: $REBALANCER_DATABASE_URL "
                        "or SQLite under ./data/)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--access-log", action="store_true", help="log every request (off: it costs on the hot path)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from api.app import create_app
    from controller.settings import Settings

    settings = Settings(database_url=args.database) if args.database else Settings()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level,
                access_log=args.access_log, http="auto", loop="auto", timeout_keep_alive=30)  # httptools/uvloop when installed
    return 0
