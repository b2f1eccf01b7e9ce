"""Every limit the engine enforces, in one frozen place (docs/DESIGN.md, "Bounds")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bounds:
    """Defaults are the design brief's; each is enforced where the data enters or accumulates."""

    sources: int = 128
    entries_per_generation: int = 10_000
    pages_per_source: int = 256
    bytes_per_candidate: int = 16 * 1024 * 1024
    name_chars: int = 128
    description_bytes: int = 8 * 1024
    retiring_max: int = 4
    cycle_timeout_s: float = 45.0
    cooldown_s: float = 1.0
    reconnect_backoff_min_s: float = 0.5
    reconnect_backoff_max_s: float = 30.0
    diagnostic_bytes: int = 512
    status_diagnostics: int = 100  # diagnostics listed in one status answer (the total is reported)
    names_per_grant: int = 1_024
    #: Names one session may hold (``gateway.limits.grants_per_session``).
    names_per_session: int = 16_384
    #: Control-API and config sessions (``gateway.limits.sessions*``, ADR 0032): in total, per
    #: owner principal, and the part of the total only operators may take.
    sessions: int = 10_000
    sessions_per_principal: int = 1_000
    sessions_operator_reserve: int = 100
    #: A control-API session unused this long is removed (0: never); one in use never is (ADR 0032).
    api_session_idle_s: float = 86_400.0
    holds: int = 64
    holds_per_owner: int = 8
    holds_operator_reserve: int = 8
    #: ``GET /v1/events`` streams open at once (``gateway.limits.event_streams*``).
    event_streams: int = 32
    event_streams_per_principal: int = 8
    event_streams_operator_reserve: int = 4
    hold_ttl_max_s: float = 3600.0
    operation_deadline_s: float = 300.0
    drain_grace_s: float = 5.0
    cycle_retry_max_s: float = 30.0
    #: One message from an upstream (a stdio line), refused while read beyond this
    #: (``gateway.limits.upstream_message_bytes``, ADR 0025).
    upstream_message_bytes: int = 32 * 1024 * 1024

    @property
    def drain_deadline_s(self) -> float:
        """How long a superseded generation may stay open: the operation deadline plus grace."""
        return self.operation_deadline_s + self.drain_grace_s
