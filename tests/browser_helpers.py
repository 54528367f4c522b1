"""Headless Chromium for the viewer tests: a screenshot and the DOM after the page's scripts ran.

Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it). Software WebGL
(SwiftShader) is asked for explicitly; every network request goes to a dead proxy
(``127.0.0.1:9``), so a page that needs the network fails to draw.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str | None:
    """The Chromium executable (``LATTICE_CHROMIUM``, else the first of ``NAMES`` on PATH), or None."""
    exe = os.environ.get("LATTICE_CHROMIUM")
    return exe if exe and Path(exe).exists() else next(filter(None, map(shutil.which, NAMES)), None)


def _run(page: Path, *extra: str, size=(1000, 700), timeout: float = 60) -> subprocess.CompletedProcess:
    args = [
        chromium(), "--headless", "--no-sandbox", "--disable-dev-shm-usage", "--no-first-run",
        "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--enable-logging=stderr", "--v=0",
        "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--disable-background-networking",
        f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=15000", *extra, page.resolve().as_uri(),
    ]  # fmt: skip
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def screenshot(page: Path, png: Path, size=(1000, 700)) -> subprocess.CompletedProcess:
    """Load ``page`` and write what the window shows to ``png``."""
    return _run(page, f"--screenshot={png}", size=size)


def dump_dom(page: Path) -> subprocess.CompletedProcess:
    """Load ``page``, let its scripts run, and print the DOM (``stdout``) and console (``stderr``)."""
    return _run(page, "--dump-dom")


def console_errors(stderr: str) -> list[str]:
    """The page's JavaScript errors among Chromium's log lines."""
    return [
        line for line in stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "Uncaught" in line)
    ]
