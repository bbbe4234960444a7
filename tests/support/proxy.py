"""Debian's nginx in front of an engine, on a free loopback port, as Chariot's gateway and pooling proxies put one in
front of it: at the root, or under a path prefix that nginx takes off before the engine sees the request."""

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import requests

from chariot_support.dev.testing import RunningEngine, free_port

NGINX = shutil.which("nginx", path="/usr/sbin:/usr/bin:/sbin:/bin") or "nginx"
POOL_TIMEOUT = 60  # seconds nginx keeps an idle upstream connection, its default

CONFIG = """
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream engine {{
        server 127.0.0.1:{engine_port};
        keepalive 16;
        keepalive_timeout {pool_timeout}s;
    }}
    server {{
        listen 127.0.0.1:{port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
{locations}
    }}
}}
"""


def locations(prefix: str) -> str:
    """At the root, every path as it came; under `prefix` (which ends in a slash), the path after it, and the prefix
    without its slash too, as the page (a gateway that does not redirect it to the slashed form)."""
    if prefix == "/":
        return "        location / { proxy_pass http://engine; }"
    bare = prefix.rstrip("/")
    return f"        location {prefix} {{ proxy_pass http://engine/; }}\n        location = {bare} {{ proxy_pass http://engine/; }}"


@contextlib.contextmanager
def nginx_in_front(engine: RunningEngine, folder: Path, *, prefix: str = "/") -> Iterator[str]:
    """nginx in front of `engine`, serving it under `prefix`, with its logs in `folder`; yields the URL of the prefix
    (without its trailing slash), stops nginx after."""
    assert shutil.which(NGINX), "nginx is not installed: apt-get install nginx-light (./scripts/test installs it)"
    port = free_port()
    conf = folder / "nginx.conf"
    conf.write_text(
        CONFIG.format(
            tmp=folder,
            engine_port=engine.http_port,
            port=port,
            pool_timeout=POOL_TIMEOUT,
            locations=locations(prefix),
        )
    )
    proxy = subprocess.Popen([NGINX, "-c", str(conf), "-g", "daemon off;"], stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}{prefix.rstrip('/')}"
        deadline = time.monotonic() + 10
        while True:
            try:
                requests.get(f"{url}/v2/health/ready", timeout=1)
                break
            except requests.ConnectionError:
                assert proxy.poll() is None and time.monotonic() < deadline, proxy.stderr.read().decode()
                time.sleep(0.05)
        yield url
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
