"""Where the CLI finds the server and the key: ``MARLFORGE_URL`` / ``MARLFORGE_API_KEY``, else the
credentials file that ``marlforge login`` writes (``$XDG_CONFIG_HOME/marlforge/credentials``,
``~/.config/marlforge/credentials`` by default; JSON, mode 0600)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

URL_VARIABLE = "MARLFORGE_URL"
KEY_VARIABLE = "MARLFORGE_API_KEY"


class MissingCredentials(Exception):
    """Neither the environment nor a credentials file names the server and a key."""


@dataclass(frozen=True)
class Credentials:
    """A server URL and an API key."""

    url: str
    key: str

    def __repr__(self) -> str:  # never shows the key
        return f"Credentials(url={self.url!r})"


def credentials_path(env: Mapping[str, str] | None = None) -> Path:
    """The credentials file's path under ``XDG_CONFIG_HOME`` (or ``~/.config``)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "marlforge" / "credentials"


def load(env: Mapping[str, str] | None = None) -> Credentials:
    """The environment's URL and key where set, completed from the credentials file (whose key
    is used only with its own URL)."""
    env = os.environ if env is None else env
    url, key = env.get(URL_VARIABLE, "").strip(), env.get(KEY_VARIABLE, "").strip()
    path = credentials_path(env)
    if (not url or not key) and path.is_file():
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            reason = f"{path} is unreadable ({exc}); run 'marlforge login'"
            raise MissingCredentials(reason) from exc
        stored_url = str(stored.get("url", "")).rstrip("/")
        # The saved key goes only to the server it was saved for, never to another MARLFORGE_URL.
        if not key and (not url or url.rstrip("/") == stored_url):
            key = str(stored.get("key", ""))
        url = url or stored_url
    if not url or not key:
        missing = " and ".join(
            name for name, value in ((URL_VARIABLE, url), (KEY_VARIABLE, key)) if not value
        )
        raise MissingCredentials(
            f"no {missing}: run 'marlforge login', or set {URL_VARIABLE} and {KEY_VARIABLE}"
        )
    return Credentials(url.rstrip("/"), key)


def save(credentials: Credentials, env: Mapping[str, str] | None = None) -> Path:
    """Write the credentials file, readable by its owner only (0600 from its first byte)."""
    path = credentials_path(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(".credentials.part")
    partial.unlink(missing_ok=True)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump({"url": credentials.url, "key": credentials.key}, out)
        out.write("\n")
    os.chmod(partial, 0o600)
    partial.replace(path)
    return path
