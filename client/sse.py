"""Reading a Server-Sent Events stream (the WHATWG format) line by line.

Only what ``GET /v1/experiments/{id}/events`` sends is needed: ``id``, ``event``, ``data``,
``retry`` and comment lines; an event ends at a blank line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


@dataclass
class RawEvent:
    """One dispatched event: its kind, data (joined lines) and id (None when it carried none)."""

    kind: str = "message"
    data: list[str] = field(default_factory=list)
    id: str | None = None


@dataclass
class SseParser:
    """Turns lines into events; ``retry_ms`` keeps the server's last reconnect hint."""

    retry_ms: int | None = None

    def events(self, lines: Iterable[str]) -> Iterator[RawEvent]:
        """The events in ``lines`` (without their line endings), in order."""
        current = RawEvent()
        for line in lines:
            if line == "":
                if current.data:
                    yield current
                current = RawEvent()
                continue
            if line.startswith(":"):
                continue  # a keep-alive comment
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                current.kind = value
            elif name == "data":
                current.data.append(value)
            elif name == "id" and "\0" not in value:
                current.id = value
            elif name == "retry" and value.isdigit():
                self.retry_ms = int(value)
