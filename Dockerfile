# The lucid-hub image: `lucid-hub serve` (gunicorn), `lucid-hub worker`, `lucid-hub db upgrade`.
# It cannot be built on the development machine (no registry access); build it in CI with
#   docker build -t ghcr.io/lucid-hub/lucid-hub:0.1.0 .
# The Helm chart runs it as user 10001 with a read-only root filesystem: data lives in /data
# (a volume) and /tmp (an emptyDir). Spark bulk diffs run from a separate image with a JVM
# (docs/spark.md); this one has none.
FROM python:3.11-slim

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
RUN pip install -e . \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /data lucid \
    && mkdir -p /data && chown lucid:lucid /data

USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["lucid-hub"]
CMD ["serve"]
