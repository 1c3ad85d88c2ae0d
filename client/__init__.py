"""The MARLForge client: a thin typed layer over the REST API (``client.api.Client``) and the
``marlforge`` verbs that use it (``client.cli``). It imports nothing of the server (``api``,
``core``, ``workers``, ``learners``): a researcher's laptop needs only this package and httpx."""

from client.api import Client
from client.streams import Event
from client.transport import ApiError, FieldError

__all__ = ["ApiError", "Client", "Event", "FieldError"]
