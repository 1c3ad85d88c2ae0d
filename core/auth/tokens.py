"""Secrets and their keyed hashes.

A key or session token is 32 random bytes (256 bits) in URL-safe base64 behind a recognisable
prefix. The database stores only ``HMAC-SHA256(server secret, token)``: a copy of the database alone
neither holds a usable token nor lets anyone test guesses offline without the server secret. The
tokens are random, so a slow password hash would add nothing but latency to every request.

The server secret is ``MARLFORGE_SECRET_KEY``; when it is not set, a random one is made once and
kept in ``<var_dir>/secret.key`` (mode 0600), which is what the embedded mode uses. Every API
process and the CLI of one deployment must share it: changing it invalidates every key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from core.settings import Settings

SECRET_FILE = "secret.key"


def new_token(prefix: str) -> str:
    """A fresh secret: ``prefix`` followed by 43 URL-safe characters (256 random bits)."""
    return prefix + secrets.token_urlsafe(32)


def token_hash(secret: bytes, token: str) -> str:
    """The keyed hash stored in place of ``token`` (hex, 64 characters)."""
    return hmac.new(secret, token.encode("utf-8"), hashlib.sha256).hexdigest()


def server_secret(settings: Settings) -> bytes:
    """The deployment's hashing secret: the setting, or the one kept under ``var_dir``."""
    configured = settings.secret_key.get_secret_value()
    if configured:
        return configured.encode("utf-8")
    return _file_secret(settings.var_dir / SECRET_FILE)


def _file_secret(path: Path) -> bytes:
    if path.is_file():
        return _read_secret(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole under a temporary name, then linked into place: link fails if the file exists,
    # so processes starting at once all end up with whichever secret was linked first.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(48))
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    text = path.read_text().strip()
    if not text:
        raise RuntimeError(f"{path} is empty; delete it to make a new server secret")
    return text.encode("utf-8")
