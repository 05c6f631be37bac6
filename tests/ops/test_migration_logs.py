"""Starting the server runs the migrations without Alembic's INFO lines (7 of them at every start): the server's
own line names the revision; Alembic's warnings would still show."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from controller import database as db


def test_migrations_log_no_alembic_info(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path}/m.db")
    try:
        with caplog.at_level(logging.INFO):
            revision = db.create_schema(engine)
            with engine.connect() as conn:
                assert db.current_revision(conn) == revision == db.head_revision()
    finally:
        engine.dispose()
    alembic = [r.getMessage() for r in caplog.records if r.name.startswith("alembic")]
    assert alembic == [], alembic
    assert logging.getLogger("alembic").level == logging.NOTSET, "the quiet level must not outlive the migrations"


def test_alembic_warnings_still_pass(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO), db.quiet_alembic():
        logging.getLogger("alembic.runtime.migration").info("hidden")
        logging.getLogger("alembic.runtime.migration").warning("shown")
    assert [r.getMessage() for r in caplog.records] == ["shown"]
