"""``rebalancer db current|upgrade|history``: the schema's Alembic revision (:mod:`controller.migrations`).

The server upgrades its database to the newest revision at every start; ``db upgrade`` does it ahead of time
(e.g. in a deployment step), under the same one-server lease, so it refuses while a server holds the database.
``--database`` as for ``serve`` (default: ``$REBALANCER_DATABASE_URL``, else SQLite under ./data/).
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("db", help="the database schema's migration revision: current, upgrade, history")
    p.add_argument("action", choices=["current", "upgrade", "history"])
    p.add_argument("--database", default=None,
                   help="SQLAlchemy URL (default: $REBALANCER_DATABASE_URL or SQLite under ./data/)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from controller import database as db

    if args.action == "history":
        from alembic.script import ScriptDirectory

        for rev in ScriptDirectory.from_config(db.alembic_config()).walk_revisions():
            head = " (head)" if rev.is_head else ""
            print(f"{rev.revision}{head}: {(rev.doc or '').strip().splitlines()[0]}")
        return 0

    from cli.serve import acquire_lease, check_database, load_settings

    settings = load_settings(args.database)
    check_database(settings)
    engine = db.make_engine(settings.sqlalchemy_url(), settings.sqlite_synchronous)
    try:
        head = db.head_revision()
        if args.action == "current":
            with engine.connect() as conn:
                current = db.current_revision(conn)
                if current is None:
                    legacy = db.legacy_revision(conn)
                    print("none" if legacy is None else
                          f"none (no migration history; its columns are revision {legacy}, the server stamps and "
                          f"upgrades it at start)")
                else:
                    print(f"{current}{' (head)' if current == head else f' (head is {head})'}")
            return 0
        if engine.dialect.name == "postgresql":  # replicas share it: migrate under their migration lock
            from controller.leadership import migrate_alone

            print(f"{migrate_alone(engine, lambda: db.create_schema(engine))} (head)")
            return 0
        lease = acquire_lease(settings)
        try:
            print(f"{db.create_schema(engine)} (head)")
        finally:
            lease.release()
        return 0
    finally:
        engine.dispose()
