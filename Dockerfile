# The lucid-hub image: `lucid-hub serve` (gunicorn), `lucid-hub worker`, `lucid-hub db upgrade`.
# It cannot be built on the development machine (no registry access); build it in CI with
#   docker build -t ghcr.io/lucid-hub/lucid-hub:0.1.0 .
#   docker build --target spark -t ghcr.io/lucid-hub/lucid-hub-spark:0.1.0 .
# The Helm chart runs it as user 10001 with a read-only root filesystem: data lives in /data
# (a volume) and /tmp (an emptyDir). The `spark` target adds a Java runtime for the chart's
# Spark publish job (Spark in local mode in its pod, or its driver with executors on
# Kubernetes); a SparkApplication needs a Spark distribution image instead
# (docs/operations.md, "Bulk snapshots with Spark").
FROM python:3.11-slim AS app

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    LUCID_DATA_DIR=/data \
    LUCID_HOST=0.0.0.0 \
    LUCID_PORT=8080

WORKDIR /opt/lucid-hub
COPY pyproject.toml README.md ./
COPY lucid_hub ./lucid_hub
COPY migrations ./migrations
COPY policies ./policies
# Editable: the Alembic migrations and default policies are read from the source tree
# (not yet shipped inside the wheel; see the notes).
# postgresql-client: pg_dump and pg_restore for `lucid-hub backup` / `restore` of a PostgreSQL hub.
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-client \
    && rm -rf /var/lib/apt/lists/* \
    && pip install -e . \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /data lucid \
    && mkdir -p /data && chown lucid:lucid /data

USER 10001:10001
EXPOSE 8080 9102
ENTRYPOINT ["lucid-hub"]
CMD ["serve"]

FROM app AS spark
USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    HOME=/tmp
USER 10001:10001

# The default target: the hub image.
FROM app
