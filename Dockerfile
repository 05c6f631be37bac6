# The Rebalancer controller image: FastAPI + uvicorn, SQLite at /data/rebalancer.db (the volume) by default,
# PostgreSQL with REBALANCER_DATABASE_URL=postgresql+psycopg://user:pass@host/db.
# One server per database: a second container on the same volume or database exits with status 2.
# Probes: liveness GET /healthz, readiness GET /readyz (database + solver workers), metrics GET /metrics.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    REBALANCER_DATABASE_URL=sqlite:////data/rebalancer.db
WORKDIR /app

COPY pyproject.toml README.md ./
COPY solvers ./solvers
COPY controller ./controller
COPY api ./api
COPY clients ./clients
COPY evaluation ./evaluation
COPY cli ./cli
RUN pip install --no-cache-dir '.[postgres]'

RUN useradd --create-home --uid 10001 rebalancer && mkdir /data && chown rebalancer /data
USER rebalancer
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["rebalancer", "serve", "--host", "0.0.0.0", "--port", "8000"]
