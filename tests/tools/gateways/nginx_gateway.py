"""nginx as a gateway under test: a streaming reverse proxy to $SSE_PROXY_UPSTREAM_URL on
$SSE_PROXY_GATEWAY_PORT (the variables `sse-proxy test-gateway` sets), run in the foreground.

    sse-proxy test-gateway -- python -m tests.tools.gateways.nginx_gateway

Everything it writes (pid, logs, temp files) stays in a temporary directory, removed when
nginx exits; no response or request buffering, HTTP/1.1 with keep-alive to the upstream (the
bench's settings). SIGTERM is passed on to nginx (a fast shutdown).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from urllib.parse import urlsplit

CONF = """\
worker_processes 1;
pid {prefix}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream case_router {{
        server {host}:{upstream_port};
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://case_router;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


def main() -> int:
    nginx = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if nginx is None:
        sys.stderr.write("nginx_gateway: nginx is not installed (scripts/system-deps.sh)\n")
        return 127
    upstream = urlsplit(os.environ["SSE_PROXY_UPSTREAM_URL"])
    prefix = tempfile.mkdtemp(prefix="sse-proxy-nginx-")
    os.chmod(prefix, 0o777)
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w", encoding="utf-8") as f:
        f.write(
            CONF.format(
                prefix=prefix,
                host=upstream.hostname,
                upstream_port=upstream.port,
                port=os.environ["SSE_PROXY_GATEWAY_PORT"],
            )
        )
    try:
        proc = subprocess.Popen(
            [nginx, "-e", "stderr", "-p", prefix, "-c", conf, "-g", "daemon off;"]
        )
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: proc.terminate())
        return proc.wait()
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
