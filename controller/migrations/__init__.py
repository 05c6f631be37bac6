"""Alembic migrations of the controller's schema (:mod:`controller.database`).

Run at every server start (``rebalancer serve`` upgrades to head after taking the one-server lease) and by hand with
``rebalancer db upgrade|current|history``. Revisions live in ``versions/``; write a new one for every change of
:mod:`controller.database`'s tables (``tests/ops/test_migrations.py`` fails when the two disagree).
"""
