"""Headless Chromium for the tests of the web console, driven through Playwright.

The browser is the distribution's (Debian's ``chromium`` package), never one
that Playwright downloads: ``SUANLI_TEST_CHROMIUM`` names its binary, else
``chromium`` on the PATH or /usr/bin/chromium. Without it or without
Playwright, the tests that need a browser are skipped, except under CI
(``CI=true``), where they fail: ``.ci/run`` installs the package and the
``test`` extra brings Playwright.

A ``Browser`` is started once per session; each test gets a ``Page`` in a
context of its own (cookies, storage), 1400 x 900, which records every
JavaScript error: ``console.error`` messages (and those the browser logs
itself, such as a resource that failed to load, but for its own request for
/favicon.ico), uncaught exceptions, unhandled rejections and a crashed
renderer. ``served(app)`` serves an ASGI app (the API) on a free loopback
port in a thread, for the browser to open.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

VIEWPORT = {"width": 1400, "height": 900}
TIMEOUT_MS = 15_000  # for any one action or wait; Playwright's default is 30 s
# as root Chromium refuses its sandbox (the pages are the project's own, from loopback);
# /dev/shm may be small in a container
ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]


class Unavailable(RuntimeError):
    """No browser here: Playwright or Chromium is missing, or Chromium would not start."""


def chromium_path() -> str:
    named = os.environ.get("SUANLI_TEST_CHROMIUM")
    if named:
        if not os.access(named, os.X_OK):
            raise Unavailable(f"SUANLI_TEST_CHROMIUM={named} is not an executable file")
        return named
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if found is None:
        raise Unavailable("no Chromium on this machine (Debian's package: apt-get install chromium)")
    return found


class Browser:
    """Chromium for the session (``close()`` ends it and Playwright's driver)."""

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or chromium_path()
        try:
            from playwright.sync_api import Error, sync_playwright
        except ImportError as exc:
            raise Unavailable(f"Playwright is not installed (the test extra has it): {exc}") from None
        started = time.monotonic()
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(
                executable_path=self.executable, args=ARGS, chromium_sandbox=False, headless=True)
        except Error as exc:
            self._playwright.stop()
            raise Unavailable(f"{self.executable} did not start under Playwright: {exc}") from None
        self.version = self._browser.version
        self.startup_s = time.monotonic() - started

    def new_page(self, **context_options) -> "Page":
        """A page in a new context: 1400 x 900 unless ``viewport`` says otherwise;
        other options go to Playwright's ``new_context`` (``base_url``, ``locale`` ...)."""
        context = self._browser.new_context(**{"viewport": VIEWPORT, **context_options})
        context.set_default_timeout(TIMEOUT_MS)
        return Page(context)

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._playwright.stop()


class Page:
    """A Playwright page that records the JavaScript errors of its context.

    Anything else is the Playwright page's (``goto``, ``click``, ``locator``,
    ``evaluate`` ...), reached through this object or ``.page``."""

    def __init__(self, context) -> None:
        self.context = context
        self.errors: list[str] = []
        errors = self.errors

        def console(message) -> None:
            where = message.location or {}
            if message.type == "error" and not _favicon(where.get("url")):
                place = f" ({where['url']}:{where.get('lineNumber', -1) + 1})" if where.get("url") else ""  # 0-based
                errors.append(f"console.error: {message.text}{place}")

        # on the context, so that a page it opens (a link to a new tab) is watched too
        context.on("console", console)
        context.on("weberror", lambda e: errors.append(f"uncaught: {_error_text(e.error)}"))
        self.page = context.new_page()
        self.page.on("crash", lambda _: errors.append("crash: the page's renderer crashed"))

    def __getattr__(self, name: str):
        if name.startswith("_") or "page" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.page, name)

    def assert_no_errors(self) -> None:
        """Fail if any JavaScript error was recorded (they are listed); then start afresh."""
        errors = list(self.errors)
        self.errors.clear()
        assert not errors, f"{len(errors)} JavaScript error(s) on the page:\n" + "\n".join(errors)

    def shot(self, path: Path | str) -> Path:
        """A PNG of the whole page, 1400 px wide (the viewport's width, one pixel a CSS pixel)
        however far it scrolls down; animations stopped, no caret."""
        path = Path(path)
        width = self.page.viewport_size["width"]
        height = self.page.evaluate(
            "Math.ceil(Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0))")
        self.page.screenshot(path=str(path), full_page=True, scale="css", animations="disabled", caret="hide",
                             clip={"x": 0, "y": 0, "width": width, "height": max(height, 1)})
        return path

    def close(self) -> None:
        self.context.close()


def png_size(path: Path | str) -> tuple[int, int]:
    """Width and height of a PNG, from its header."""
    head = Path(path).read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def _favicon(url: str | None) -> bool:
    """The browser's own request for /favicon.ico (when a page names no icon): its 404 is no
    error of the page's."""
    return bool(url) and urlsplit(url).path == "/favicon.ico"


def _error_text(error) -> str:
    return (getattr(error, "stack", None) or getattr(error, "message", None) or str(error)).strip()


@contextmanager
def served(app, timeout: float = 30.0) -> Iterator[str]:
    """Serve the ASGI ``app`` with uvicorn in a thread on a free port of 127.0.0.1; yields its
    base URL (``http://127.0.0.1:PORT``) and stops the server after."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"uvicorn-{port}")
    thread.start()
    try:
        end = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server's thread ended before it served")
            if time.monotonic() > end:
                raise RuntimeError(f"the server did not come up within {timeout:.0f} s")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()
