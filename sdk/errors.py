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
        """Whether retrying the same request may succeed: unreachable (0), 429, 503 or 504."""
        return self.status in (0, 429, 503, 504)


class Unreachable(ReconcilerAPIError):
    """The gateway could not be reached (connection refused, timeout)."""


class Unauthenticated(ReconcilerAPIError):
    """401: no bearer token, or one the gateway does not accept."""


class Forbidden(ReconcilerAPIError):
    """403: authenticated, but the role may not do this (e.g. an owner calling an operator endpoint)."""


class NotFound(ReconcilerAPIError):
    """404: no such thing, or one the caller may not see (another owner's session or hold)."""


class Conflict(ReconcilerAPIError):
    """409: the request conflicts with the gateway's state (a revision no longer live, deleting a
    config-declared session, a non-retryable engine error)."""


class InvalidRequest(ReconcilerAPIError):
    """400, 413 or 422: the request itself is invalid; retrying it unchanged fails the same way."""


class TooManyRequests(ReconcilerAPIError):
    """429: over a bound (sessions, holds); retryable once one is released or expires."""


class Unavailable(ReconcilerAPIError):
    """503: the gateway cannot serve this now (nothing published yet, shutting down, every connection
    slot busy, a retryable engine error); retryable."""


class RefreshTimeout(ReconcilerAPIError):
    """504: no reconcile cycle finished within the requested timeout; retryable."""


class ServerError(ReconcilerAPIError):
    """Any other 5xx answer."""


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
    """The :class:`ReconcilerAPIError` subclass for ``status`` (:data:`BY_STATUS`; other 5xx ->
    ServerError, anything else the base class), built with ``code`` and ``message``."""
    cls = BY_STATUS.get(status, ServerError if status >= 500 else ReconcilerAPIError)
    return cls(status, code, message)
