"""A dashboard tab for the browser tests: console errors recorded, screenshots saved under
``test-artifacts/browser/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"


class Page:
    """A browser tab on the dashboard that records console errors and takes screenshots."""

    def __init__(self, tab: Any, base_url: str) -> None:
        self.tab = tab
        self.base_url = base_url
        self.errors: list[str] = []
        tab.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        tab.set_default_timeout(30_000)

    def open(self, fragment: str = "#/") -> None:
        """Load the dashboard at ``fragment``."""
        self.tab.goto(f"{self.base_url}/{fragment}")

    def screenshot(self, name: str) -> Path:
        """Save the whole page as ``test-artifacts/browser/<name>.png``."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        # From the top: a full-page shot of a scrolled page repeats the sticky header mid-page.
        self.tab.evaluate("window.scrollTo(0, 0)")
        self.tab.screenshot(path=str(path), full_page=True)
        return path

    def allow_errors(self, fragment: str) -> list[str]:
        """Take the logged errors containing ``fragment`` off the list (one the test caused on
        purpose: Chromium logs every 4xx response as an error) and return them."""
        allowed = [e for e in self.errors if fragment in e]
        self.errors = [e for e in self.errors if fragment not in e]
        return allowed
