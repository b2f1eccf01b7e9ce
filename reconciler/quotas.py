"""Quotas: what one principal, and everyone together, may hold of a control-API resource (ADR 0032).

A :class:`Quota` is three numbers for one resource (sessions, revision holds, event streams):

- ``total``: the most that may exist at once, whoever holds them;
- ``per_principal``: the most one principal may hold (by role-qualified principal id, operators
  included), so no principal can take what another needs;
- ``reserve``: the last ``reserve`` of ``total`` only an operator may take, so an incident in
  which owners filled every slot can still be handled (an operator can still open a session, hold
  a revision, follow the events).

:meth:`Quota.check` is the one check: it raises the resource's :class:`~mcp_reconciler.reconciler.errors.QuotaError`
naming the bound that refused (its config key, ``gateway.limits.<key>``, and its value) and
counts the refusal (``quota.refused``, by bound). It is synchronous and O(1) given the counts, so
the count and the admission happen in one step of the event loop: two concurrent requests cannot
both take the last slot."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import QuotaError

#: Where the quota keys live in the config file.
LIMITS_PREFIX = "gateway.limits."


@dataclass(frozen=True, slots=True)
class Quota:
    """The bounds of one resource (module docstring). ``key`` is the resource's config key
    (``sessions``, ``holds``, ``event_streams``): the per-principal bound is ``<key>_per_principal``
    and the reserve ``<key>_operator_reserve``. ``noun`` names the resource in messages."""

    key: str
    noun: str
    total: int
    per_principal: int
    reserve: int = 0

    def check(self, error: type[QuotaError], *, held: int, mine: int, operator: bool) -> None:
        """Raise ``error`` unless one more may be taken: ``held`` exist in total, ``mine`` of them
        are the principal's, ``operator``: the caller may use the reserve."""
        # The config refuses a reserve as large as its total; bounds built in code are clamped so
        # that owners always keep one slot.
        reserve = min(self.reserve, self.total - 1)
        room = self.total if operator else self.total - reserve
        if held >= room:
            if operator or held >= self.total:
                self._refuse(error, self.key, self.total, f"at most {self.total} {self.noun} may exist")
            self._refuse(
                error,
                f"{self.key}_operator_reserve",
                reserve,
                f"at most {room} {self.noun} may exist for owners ({reserve} of "
                f"{LIMITS_PREFIX}{self.key} = {self.total} are kept for operators)",
            )
        if mine >= self.per_principal:
            self._refuse(
                error,
                f"{self.key}_per_principal",
                self.per_principal,
                f"a principal may hold at most {self.per_principal} {self.noun}",
            )

    @staticmethod
    def _refuse(error: type[QuotaError], key: str, limit: int, message: str) -> None:
        bound = LIMITS_PREFIX + key
        telemetry.quota_refused.add(1, {"bound": bound})
        raise error(f"{message} ({bound}); release one first or ask an operator", bound=bound, limit=limit)


def session_quota(bounds: Bounds) -> Quota:
    """Control-API and config sessions (``gateway.limits.sessions*``)."""
    b = bounds
    return Quota("sessions", "sessions", b.sessions, b.sessions_per_principal, b.sessions_operator_reserve)


def hold_quota(bounds: Bounds) -> Quota:
    """Revision holds (``gateway.limits.holds*``)."""
    return Quota("holds", "revision holds", bounds.holds, bounds.holds_per_owner, bounds.holds_operator_reserve)


def stream_quota(bounds: Bounds) -> Quota:
    """``GET /v1/events`` streams (``gateway.limits.event_streams*``)."""
    return Quota(
        "event_streams",
        "event streams",
        bounds.event_streams,
        bounds.event_streams_per_principal,
        bounds.event_streams_operator_reserve,
    )
