"""The page at `GET /` that tries the model in a browser: page.html with page.css and page.js inline (the three files
beside this module, read from the package once), served with a Content-Security-Policy that lets it run only its own
script and style and reach only the engine that served it."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from importlib import resources

from fastapi import FastAPI
from starlette.responses import Response

from chariot_support.model.tasks import TaskType

# Where page.html takes its style, its script and the task table (each marker once).
STYLE, SCRIPT, TASKS = "/*style*/", "/*script*/", "/*tasks*/"


def task_table() -> dict[str, dict]:
    """What the page needs of each task type, keyed by the name the model's platform ends with
    (chariot-v2-kserve_object_detection): Chariot's name and the actions, the default first."""
    return {task.name.lower(): {"name": task.value, "actions": list(task.actions)} for task in TaskType}


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@functools.cache
def page() -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The page's bytes and headers."""
    folder = resources.files(__package__)
    html, style, script = ((folder / name).read_text(encoding="utf-8") for name in ("page.html", "page.css", "page.js"))
    # Inside <script> a "</" could end the element early; JSON reads "<\/" as "</".
    tasks = json.dumps(task_table(), separators=(",", ":")).replace("</", "<\\/")
    for marker, text in ((STYLE, style), (SCRIPT, script), (TASKS, tasks)):
        if html.count(marker) != 1:
            raise ValueError(f"page.html must hold {marker} once, not {html.count(marker)} times")
        html = html.replace(marker, text)
    # Only this script and this style run (the task table is data, never run). The page fetches only from the engine
    # ('self': behind a gateway, the gateway's origin), shows pictures from the files given to it through canvases
    # (no URL at all), and its one image is its empty data: icon (else the browser asks the engine for
    # /favicon.ico, a 404). Nothing may frame it or take it elsewhere.
    policy = "; ".join(
        [
            "default-src 'none'",
            f"script-src {_sha256(script)}",
            f"style-src {_sha256(style)}",
            "img-src data:",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    body = html.encode()
    headers = {
        "content-type": "text/html; charset=utf-8",
        "content-length": str(len(body)),
        "content-security-policy": policy,
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
        "referrer-policy": "no-referrer",
        "cross-origin-opener-policy": "same-origin",
        "cross-origin-resource-policy": "same-origin",
        "permissions-policy": "camera=(), microphone=(), geolocation=(), payment=(), usb=()",
        # The engine's image changes with each deployment; the page is small: ask each time.
        "cache-control": "no-cache",
    }
    return body, [(name.encode(), value.encode()) for name, value in headers.items()]


def install_page(app: FastAPI) -> None:
    """Serve the page at `GET /` (and HEAD); nothing else changes."""

    async def serve_page() -> Response:
        body, headers = page()
        response = Response(body)
        response.raw_headers = list(headers)
        return response

    app.add_api_route("/", serve_page, methods=["GET", "HEAD"], include_in_schema=False)
