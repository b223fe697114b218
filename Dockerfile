# sse-proxy: slim image, non-root, configured from the environment (SSE_PROXY_*) or a
# mounted config file (SSE_PROXY_CONFIG=/path/in/the/container.toml).
#
#   docker build -t sse-proxy:0.1.0 .
#   docker run --rm -p 127.0.0.1:8787:8787 -e SSE_PROXY_UPSTREAM=https://api.openai.com sse-proxy:0.1.0
#   docker run --rm -i sse-proxy:0.1.0 check --text - < capture.sse  # any other command
#
# docs/serving.md explains each choice (publishing on loopback, the stop timeout, health).

# The base by exact version and digest: the same base every build until someone bumps both.
FROM python:3.12.8-slim-bookworm@sha256:2199a62885a12290dc9c5be3ca0681d367576ab7bf037da120e564723292a2f0

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="sse-proxy" \
      org.opencontainers.image.description="A local reverse proxy that reassembles, validates and re-chunks Server-Sent Events streams from LLM APIs." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/library/python:3.12.8-slim-bookworm" \
      org.opencontainers.image.base.digest="sha256:2199a62885a12290dc9c5be3ca0681d367576ab7bf037da120e564723292a2f0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Exact versions of every runtime dependency (scripts/image-constraints.py writes them
# from a tested venv); pyproject.toml's ranges stay for people installing the package.
COPY deploy/docker/constraints.txt /tmp/constraints.txt
COPY pyproject.toml README.md ./
COPY sse_proxy ./sse_proxy
COPY config ./config
RUN pip install --constraint /tmp/constraints.txt . \
    && groupadd --system --gid 10001 sseproxy \
    && useradd --system --uid 10001 --gid 10001 --no-create-home sseproxy

USER 10001:10001
# Inside the container only: listen on all interfaces so the published port reaches us.
# Set SSE_PROXY_UPSTREAM (required), and any other SSE_PROXY_<SETTING>.
# The drain after SIGTERM (8 s) ends before `docker stop` gives up and SIGKILLs (10 s by
# default); for a longer grace, raise both: docker run --stop-timeout 60 -e
# SSE_PROXY_SHUTDOWN_GRACE=50 ... (Kubernetes: terminationGracePeriodSeconds).
ENV SSE_PROXY_HOST=0.0.0.0 \
    SSE_PROXY_PORT=8787 \
    SSE_PROXY_SHUTDOWN_GRACE=8
# With SSE_PROXY_ADMIN_PORT=9787, health and metrics move to a listener of their own on
# 9787 (publish it too: -p 127.0.0.1:9787:9787), and 8787 answers 404 under /_sse-proxy.
EXPOSE 8787
# `sse-proxy health` reads the effective settings (SSE_PROXY_CONFIG, SSE_PROXY_*), so a port,
# admin port or admin prefix set in a mounted config file is the one it asks.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["sse-proxy", "health", "--timeout", "3"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["sse-proxy"]
CMD ["serve"]
