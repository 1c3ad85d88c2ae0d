"""Identifiers: ULIDs (26 Crockford base32 characters) that sort by creation time.

Sorting by id is sorting by age, so cursor pagination needs no second column.
"""

from __future__ import annotations

import os
import re
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_PATTERN = r"^[0-9A-HJKMNP-TV-Z]{26}$"
"""An id's shape, as a regular expression (the OpenAPI schema publishes it too)."""
ULID_RE = re.compile(ID_PATTERN)
MAX_INT64 = 2**63 - 1
"""The largest integer every database column of the service holds: the bound of every integer the
API accepts, so that no value reaches SQL that the database cannot compare."""


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
