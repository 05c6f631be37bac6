# The Rebalancer controller image: FastAPI + uvicorn, one process (`rebalancer serve`, the solver workers are its
# children). SQLite at /data/rebalancer.db (the volume) by default; PostgreSQL with
# REBALANCER_DATABASE_URL=postgresql+psycopg://user:pass@host/db (see compose.yaml and docs/operations.md).
# One server per database: a second container on the same volume or database exits with status 2.
# Probes: liveness GET /healthz, readiness GET /readyz (database + solver workers, the HEALTHCHECK), metrics /metrics.
# Every version comes from the lock (constraints.txt, requirements-image.txt; `make lock` refreshes them).
# tests/ops/test_image_static.py checks the rules of this file; tests/ops/test_image_smoke.py runs its steps.

# ---- build: the project's two wheels (rebalancer-client, rebalancer-server), the build backend pinned by the lock
FROM python:3.11.7-slim-bookworm AS build
WORKDIR /src
COPY constraints.txt ./
RUN pip install --no-cache-dir --disable-pip-version-check -c constraints.txt setuptools wheel
COPY pyproject.toml README.md LICENSE ./
COPY clients ./clients
COPY api ./api
COPY cli ./cli
COPY controller ./controller
COPY evaluation ./evaluation
COPY solvers ./solvers
RUN pip wheel --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation --wheel-dir /wheels \
    ./clients/python .

# ---- the image
FROM python:3.11.7-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PORT=8000 \
    REBALANCER_DATABASE_URL=sqlite:////data/rebalancer.db
RUN groupadd --system --gid 10001 rebalancer \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home rebalancer \
    && mkdir /data && chown 10001:10001 /data

# The dependencies in their own layer: it is rebuilt only when the lock changes, not with every source change.
COPY requirements-image.txt /tmp/requirements-image.txt
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps -r /tmp/requirements-image.txt
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps /wheels/*.whl && pip check && rm -rf /wheels

USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
# Readiness, not liveness: unhealthy while the database or the solver workers are not usable. $PORT as the server.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('PORT', '8000'), timeout=4)"]
# `serve` listens on $PORT (default 8000); SIGTERM stops it cleanly (docker stop).
CMD ["rebalancer", "serve", "--host", "0.0.0.0"]
