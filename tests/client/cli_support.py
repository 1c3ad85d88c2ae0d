"""Types shared by the client tests' fixtures and tests."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from e2e_support import Api


@dataclass(frozen=True)
class LiveServer:
    """The API's URL, a member key of project ``default`` and a client of the API."""

    url: str
    key: str
    api: Api


Cli = Callable[..., subprocess.CompletedProcess[str]]
"""``marlforge(*args, env=..., stdin=...)``: the finished command."""
