# syntax=docker/dockerfile:1
# xpert-gateway container image.
#   docker build -t xpert-gateway .
#   docker compose up            # gateway + Redis, console at http://127.0.0.1:8080/console/
#                                # (published on localhost only: see docker-compose.yml)

# --- builder: the locked dependencies and the project, installed into /opt/venv ------------
FROM python:3.11-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    UV_PYTHON_DOWNLOADS=never \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy

WORKDIR /src
# The pinned installer (hashes checked), then exactly what uv.lock pins: the image gets the
# same versions as `./dev.sh run` and the test suite.
COPY requirements-uv.txt ./
RUN pip install --require-hashes -r requirements-uv.txt
COPY pyproject.toml uv.lock README.md LICENSE ./
RUN uv sync --locked --no-dev --no-install-project
COPY gateway ./gateway
COPY sessions ./sessions
COPY adapters ./adapters
RUN uv sync --locked --no-dev --no-editable

# --- runtime: the installed environment only, run as an unprivileged user -------------------
FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH

COPY --from=builder /opt/venv /opt/venv

RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --home-dir /app --shell /usr/sbin/nologin gateway \
    && mkdir -p /app/data \
    && chown -R gateway:gateway /app

WORKDIR /app
COPY --chown=gateway:gateway config/ /app/config/

USER gateway

EXPOSE 8080
VOLUME ["/app/data"]

HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status == 200 else 1)"]

ENTRYPOINT ["xpert-gateway"]
CMD ["run", "--config", "/app/config/gateway.docker.yaml"]
