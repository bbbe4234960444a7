"""A real browser for the engine's page: Debian's Chromium, driven headless by Playwright from PyPI (Playwright is never
asked to download one), and a tab on it that notes what a user would not see: console errors, script errors and
requests to anywhere but the engine."""

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Headless, as root (no sandbox), and nothing the browser would do on its own: no update checks, no sync, no GPU.
ARGUMENTS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-gpu",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@contextlib.contextmanager
def chromium() -> Iterator:
    """Chromium, started once for as long as the block runs."""
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM), "Chromium is not installed: apt-get install chromium (./scripts/test installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGUMENTS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Tab:
    """A page in a fresh browser context, and what went wrong on it."""

    page: object
    errors: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)

    def elsewhere(self, origin: str) -> list[str]:
        """What the page asked of anything but `origin` (scheme, host and port)."""
        return [url for url in self.requested if "{0.scheme}://{0.netloc}".format(urlsplit(url)) != origin]


@contextlib.contextmanager
def tab(browser, viewport: dict = DESKTOP) -> Iterator[Tab]:
    context = browser.new_context(viewport=viewport)
    try:
        page = context.new_page()
        opened = Tab(page)
        page.on("console", lambda message: message.type == "error" and opened.errors.append(message.text))
        page.on("pageerror", lambda error: opened.errors.append(f"uncaught: {error}"))
        page.on("request", lambda request: opened.requested.append(request.url))
        yield opened
    finally:
        context.close()
