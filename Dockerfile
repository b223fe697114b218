# sse-proxy: slim image, non-root, configured from the environment (SSE_PROXY_*).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY config ./config
RUN pip install . && useradd --system --uid 10001 --no-create-home sseproxy

USER 10001
# Inside the container only: listen on all interfaces so the published port reaches us.
# Set SSE_PROXY_UPSTREAM (required), and any other SSE_PROXY_<SETTING>.
ENV SSE_PROXY_HOST=0.0.0.0 \
    SSE_PROXY_PORT=8787
EXPOSE 8787
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('SSE_PROXY_PORT', '8787') + '/_sse-proxy/health', timeout=2).status == 200 else 1)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["sse-proxy", "serve"]
