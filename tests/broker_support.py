"""Reading what waits in the embedded broker (kombu's filesystem transport) of a test."""

from __future__ import annotations

import base64
import json
from typing import Any

from core.settings import Settings


def queued_messages(settings: Settings) -> list[dict[str, Any]]:
    """The Celery messages waiting in the embedded broker's folder (queue, task, args)."""
    folder = settings.broker_dir / "queue"
    messages = []
    for path in sorted(folder.glob("*.msg")) if folder.is_dir() else []:
        payload = json.loads(path.read_text())
        body = json.loads(base64.b64decode(payload["body"]))
        messages.append(
            {
                "queue": path.name.partition(".")[2][: -len(".msg")],
                "task": payload["headers"]["task"],
                "args": body[0],
            }
        )
    return messages
