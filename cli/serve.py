"""``rebalancer serve``: start the controller with uvicorn.

``rebalancer serve [--host H] [--port P] [--database URL]``; without ``--database`` the URL comes from
``REBALANCER_DATABASE_URL``, else SQLite at ``./data/rebalancer.db`` (WAL). Other settings come from the
environment (``REBALANCER_*``, see controller/settings.py).
"""

from __future__ import annotations

import argparse

from cli.common import CLIError


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0–65535 (0 = any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535, got {value}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start the controller (FastAPI + uvicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8000)
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

    settings = load_settings(args.database)
    check_database(settings)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level,
                access_log=args.access_log, http="auto", loop="auto", timeout_keep_alive=30)  # httptools/uvloop when installed
    return 0


def load_settings(database: str | None):
    """Settings from the environment (and ``--database``); a CLIError naming the bad variable otherwise."""
    import pydantic

    from controller.settings import Settings

    try:
        return Settings(database_url=database) if database else Settings()
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        name = "REBALANCER_" + ".".join(str(p) for p in err["loc"]).upper()
        raise CLIError(f"setting {name}: {err['msg']}") from None


def check_database(settings) -> None:
    """Open the database once before serving, so a bad URL or an unreachable server is one clear line."""
    import sqlalchemy.exc
    from sqlalchemy import text

    from controller.repository import make_engine

    url = settings.sqlalchemy_url()
    try:
        engine = make_engine(url, settings.sqlite_synchronous)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as exc:
        raise CLIError(f"--database: not a usable database URL {settings.database_url!r}: {exc}") from None
    except (sqlalchemy.exc.SQLAlchemyError, OSError, ImportError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise CLIError(f"--database: cannot open {settings.database_url!r}: {reason}") from None
