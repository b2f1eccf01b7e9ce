"""Typed SDK errors, one per control-API error class."""

from __future__ import annotations


class ReconcilerAPIError(Exception):
    """Base: ``status`` is the HTTP status (0 when the server was not reached), ``code`` the
    API's stable error code, ``message`` its sanitized message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.status, self.code, self.message = status, code, message

    @property
    def retryable(self) -> bool:
        return self.status in (0, 429, 503, 504)


class Unreachable(ReconcilerAPIError):
    """The gateway could not be reached (connection refused, timeout)."""


class Unauthenticated(ReconcilerAPIError):
    pass


class Forbidden(ReconcilerAPIError):
    pass


class NotFound(ReconcilerAPIError):
    pass


class Conflict(ReconcilerAPIError):
    pass


class InvalidRequest(ReconcilerAPIError):
    pass


class TooManyRequests(ReconcilerAPIError):
    pass


class Unavailable(ReconcilerAPIError):
    pass


class RefreshTimeout(ReconcilerAPIError):
    pass


class ServerError(ReconcilerAPIError):
    pass


BY_STATUS: dict[int, type[ReconcilerAPIError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
    429: TooManyRequests,
    503: Unavailable,
    504: RefreshTimeout,
}


def error_for(status: int, code: str, message: str) -> ReconcilerAPIError:
    cls = BY_STATUS.get(status, ServerError if status >= 500 else ReconcilerAPIError)
    return cls(status, code, message)
