# The stores of docker-compose.yml, for scripts/compose-smoke.sh where no image registry can be
# reached: PostgreSQL 15 and Redis 7 from Debian's packages, and moto's S3 server from PyPI in the
# place of MinIO. One image plays the three (docker-compose.smoke.yml picks the entrypoint); each
# honours what the official image's contract gives it in docker-compose.yml (POSTGRES_USER,
# POSTGRES_PASSWORD, POSTGRES_DB and /var/lib/postgresql/data; the redis-server command line and
# /data), on the port the override names, since with host networking the host's own PostgreSQL and
# Redis hold 5432 and 6379.
ARG BASE_IMAGE=marlforge-base:bookworm
# hadolint ignore=DL3006
FROM ${BASE_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 redis-server \
    && rm -rf /var/lib/apt/lists/*

# The same S3 server the suite's storage tests run (pyproject.toml's dev extra).
RUN pip install --no-cache-dir "moto[server]>=5.0,<6"

COPY standin-postgres standin-redis standin-s3 standin-s3-init redis-cli /usr/local/bin/
