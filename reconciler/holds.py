"""Revision holds: a bounded, expiring pin that keeps one generation callable for a run
(an SDK client pinning a revision across many requests).

Bounds (the hold quota, ADR 0032): at most ``max_holds`` holds, each at most ``max_ttl_s``, at
most ``max_per_owner`` per principal (operators included), and the last ``reserve`` of
``max_holds`` only for operators. A held superseded generation stays open until the hold expires or is released —
its drain deadline is extended to the hold's expiry, never beyond ``max_ttl_s`` — then retires as
usual (I5).

Holds cannot freeze publication. A publication is deferred only while the retiring set is full
(``retiring_max`` superseded revisions open) and the current revision is pinned; holds last up to
an hour, operations only up to their drain deadline. So holds together may keep at most
``retiring_max - 1`` distinct revisions alive (the current one counted: it becomes superseded at
the next publication): a hold on another revision beyond that is refused (``HoldSlotsError``,
retryable) and the retiring set always has a slot that only operations — bounded by the drain
deadline — can fill. Any number of holds may share a revision already held."""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from mcp_reconciler.reconciler.errors import HoldError, HoldLimitError, HoldSlotsError
from mcp_reconciler.reconciler.events import HoldChanged
from mcp_reconciler.reconciler.pins import Pin
from mcp_reconciler.reconciler.quotas import Quota
from mcp_reconciler.reconciler.runtime import Runtime

log = logging.getLogger("mcp_reconciler.holds")


@dataclass(frozen=True, slots=True)
class HoldInfo:
    """A hold as reported to its owner: immutable, with wall-clock creation and expiry times."""

    id: str
    revision: int
    owner: str
    created_at: float  # wall clock
    expires_at: float  # wall clock


class HoldRecordLike(Protocol):
    """What :meth:`HoldRegistry.adopt` needs of a hold made elsewhere."""

    @property
    def id(self) -> str:
        """The hold's id."""
        ...

    @property
    def revision(self) -> int:
        """The held revision."""
        ...

    @property
    def owner(self) -> str:
        """The principal that holds it."""
        ...

    @property
    def created_at(self) -> float:
        """Wall-clock creation time."""
        ...

    @property
    def expires_at(self) -> float:
        """Wall-clock expiry time."""
        ...


class _Hold:
    __slots__ = ("deadline", "info", "pin")

    def __init__(self, info: HoldInfo, pin: Pin, deadline: float) -> None:
        self.info = info
        self.pin = pin
        self.deadline = deadline  # anyio clock


_ids = itertools.count(1)


class HoldRegistry:
    """The bounded set of revision holds over one runtime (see the module docstring). Single event
    loop; :meth:`run` must run in the owner's task group to expire holds and release them all when
    it ends. Bounds default to the runtime's ``Bounds`` (``holds``, ``hold_ttl_max_s``,
    ``holds_per_owner``)."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        max_holds: int | None = None,
        max_ttl_s: float | None = None,
        max_per_owner: int | None = None,
        reserve: int | None = None,
    ) -> None:
        self.runtime = runtime
        b = runtime.bounds
        self.max_holds = max_holds if max_holds is not None else b.holds
        self.max_ttl_s = max_ttl_s if max_ttl_s is not None else b.hold_ttl_max_s
        # Per owner, so one owner cannot fill the retiring set and defer publications for everyone.
        self.max_per_owner = max_per_owner if max_per_owner is not None else b.holds_per_owner
        # Kept for operators, so an incident in which owners hold every slot can still be handled.
        self.reserve = min(reserve if reserve is not None else b.holds_operator_reserve, self.max_holds - 1)
        self._holds: dict[str, _Hold] = {}
        self._wake = anyio.Event()
        self._listeners: list[Callable[[HoldChanged], None]] = []

    def add_listener(self, listener: Callable[[HoldChanged], None]) -> Callable[[], None]:
        """Call ``listener(change)`` synchronously when a hold is added, released or expires
        (not for the holds teardown releases); returns a remover. A listener that raises is logged."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _tell(self, change: str, info: HoldInfo) -> None:
        event = HoldChanged(change, info.id, info.revision, info.owner, info.expires_at)  # type: ignore[arg-type]
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("hold listener failed")

    @property
    def max_held_revisions(self) -> int:
        """How many distinct revisions holds may keep alive at once: ``retiring_max - 1``."""
        return self.runtime.bounds.retiring_max - 1

    def held_revisions(self) -> set[int]:
        """The revisions at least one hold keeps alive."""
        return {h.info.revision for h in self._holds.values()}

    @property
    def quota(self) -> Quota:
        """The hold quota (``gateway.limits.holds*``)."""
        return Quota("holds", "revision holds", self.max_holds, self.max_per_owner, self.reserve)

    def create(self, revision: int, ttl_s: float, *, owner: str = "operator::", operator: bool = True) -> HoldInfo:
        """Hold ``revision`` for ``ttl_s`` seconds for the principal ``owner`` (``operator``: the
        caller may use the operators' reserve). Raises ``HoldError`` (TTL out of range),
        ``HoldLimitError`` (the hold quota: in total, for owners together, or for ``owner``),
        ``HoldSlotsError`` (one more held revision would let holds fill the retiring set; see the
        module docstring) or ``RevisionUnavailableError``."""
        if not (0 < ttl_s <= self.max_ttl_s):
            raise HoldError(f"ttl_s must be > 0 and at most {self.max_ttl_s:g} seconds")
        mine = sum(1 for h in self._holds.values() if h.info.owner == owner)
        self.quota.check(HoldLimitError, held=len(self._holds), mine=mine, operator=operator)
        live = self.runtime.get(revision)  # RevisionUnavailableError if not live
        held = self.held_revisions()
        if revision not in held and len(held) >= self.max_held_revisions:
            retiring_max = self.runtime.bounds.retiring_max
            if self.max_held_revisions == 0:
                raise HoldSlotsError(
                    "revision holds need retiring_max of at least 2 (it is 1): a hold would block publication"
                )
            shown = ", ".join(str(r) for r in sorted(held))
            raise HoldSlotsError(
                f"holds may keep at most {self.max_held_revisions} revisions alive (retiring_max {retiring_max} - 1), "
                f"so that they can never defer publication; revisions {shown} are held: hold one of those, or retry "
                "when a hold is released or expires"
            )
        pin = live.pin()
        now_wall, now = time.time(), anyio.current_time()
        info = HoldInfo(
            id=f"h{next(_ids)}-{secrets.token_hex(4)}",
            revision=revision,
            owner=owner,
            created_at=now_wall,
            expires_at=now_wall + ttl_s,
        )
        self._holds[info.id] = _Hold(info, pin, now + ttl_s)
        live.hold_until = max(live.hold_until, now + ttl_s)
        self._wake.set()
        self._tell("added", info)
        return info

    def adopt(self, record: HoldRecordLike) -> HoldInfo:
        """Keep a hold made elsewhere (another replica, limits already checked cluster-wide by
        the store): pins ``record.revision`` here until ``record.expires_at`` (wall clock).
        Idempotent by id. RevisionUnavailableError if this replica does not have the revision;
        HoldError if it already expired."""
        existing = self._holds.get(record.id)
        if existing is not None:
            return existing.info
        remaining = record.expires_at - time.time()
        if remaining <= 0:
            raise HoldError("the hold already expired")
        live = self.runtime.get(record.revision)
        pin = live.pin()
        info = HoldInfo(record.id, record.revision, record.owner, record.created_at, record.expires_at)
        deadline = anyio.current_time() + min(remaining, self.max_ttl_s)
        self._holds[info.id] = _Hold(info, pin, deadline)
        live.hold_until = max(live.hold_until, deadline)
        self._wake.set()
        self._tell("added", info)
        return info

    def release(self, hold_id: str, *, _why: str = "released") -> HoldInfo | None:
        """Release ``hold_id``'s pin and forget it; its info, or None if no such hold exists (idempotent)."""
        hold = self._holds.pop(hold_id, None)
        if hold is None:
            return None
        if _why:  # before the pin goes: a retirement it causes is the later event
            self._tell(_why, hold.info)
        hold.pin.release()
        return hold.info

    def get(self, hold_id: str) -> HoldInfo | None:
        """The hold ``hold_id``, or None if it does not exist (expired or released)."""
        hold = self._holds.get(hold_id)
        return hold.info if hold is not None else None

    def list(self) -> list[HoldInfo]:
        """A snapshot of every hold not yet released or expired."""
        return [h.info for h in self._holds.values()]

    def release_all(self) -> None:
        """Release every hold (teardown); afterwards the registry is empty."""
        for hold_id in list(self._holds):
            self.release(hold_id, _why="")

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Expire holds at their deadlines. Run in the owner's task group."""
        task_status.started()
        try:
            while True:
                now = anyio.current_time()
                for hold_id, hold in list(self._holds.items()):
                    if hold.deadline <= now:
                        self.release(hold_id, _why="expired")
                nxt = min((h.deadline for h in self._holds.values()), default=float("inf"))
                with anyio.move_on_after(max(0.0, nxt - anyio.current_time())):
                    await self._wake.wait()
                self._wake = anyio.Event()
        finally:
            self.release_all()
