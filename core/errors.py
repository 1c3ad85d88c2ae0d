"""The service's own failures, raised by services and mapped to HTTP statuses by the API."""

from __future__ import annotations


class ServiceError(Exception):
    """A request the service refuses; ``code`` is stable, the message is for people."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ServiceError):
    """The experiment or checkpoint does not exist."""

    code = "not_found"


class Conflict(ServiceError):
    """The request does not fit the experiment's current status."""

    code = "conflict"


class QuotaExceeded(ServiceError):
    """A project quota is reached; ``retry_after_s`` says when a retry can succeed, if known."""

    code = "quota_exceeded"

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BrokerUnavailable(ServiceError):
    """The broker could not take the job; the experiment is marked failed and can be resumed."""

    code = "broker_unavailable"
