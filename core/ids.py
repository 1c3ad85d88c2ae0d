"""Identifiers: ULIDs (26 Crockford base32 characters) that sort by creation time.

Sorting by id is sorting by age, so cursor pagination needs no second column.
"""

from __future__ import annotations

import os
import re
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ULID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


def new_id() -> str:
    """A new ULID: 48 bits of milliseconds since the epoch, then 80 random bits."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def is_id(text: str) -> bool:
    """True when ``text`` has the shape of an id (so malformed ids never reach SQL)."""
    return bool(ULID_RE.match(text))
