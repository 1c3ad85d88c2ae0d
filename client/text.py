"""What the CLI prints of the server's strings: never raw.

A name, a reason or a log line comes from the server, and a team-mate (or anyone with a key of
the project) wrote it. Printed raw, ``"\\x1b[2J"`` clears the reader's screen, ``"\\x1b]0;..."``
retitles the terminal, a ``"\\n"`` forges a line of a table and a bidirectional override reorders
what is shown. ``safe`` writes each such character as its escape (``\\x1b``, ``\\n``,
``\\u202e``), so what is printed is what was stored, visibly. JSON output (``--json``) needs
nothing: ``json.dumps`` escapes every control character itself.
"""

from __future__ import annotations

_CONTROL = [
    *range(0x20),
    *range(0x7F, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CONTROL}


def safe(value: object) -> str:
    """``value`` as text, with every control, line-separator and bidirectional character written
    as its escape (see the module's docstring)."""
    return str(value).translate(_ESCAPES)
