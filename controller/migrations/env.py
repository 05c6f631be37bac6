"""Alembic environment: migrations run on the connection :func:`controller.database.create_schema` hands over
(``config.attributes["connection"]``), or on ``sqlalchemy.url`` of the config when there is none."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from controller.database import metadata

config = context.config


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is None:
        engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.begin() as own:
            context.configure(connection=own, target_metadata=metadata)
            with context.begin_transaction():
                context.run_migrations()
        engine.dispose()
        return
    context.configure(connection=conn, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: run them against the database")
run()
