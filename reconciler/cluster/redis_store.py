"""The cluster store on Redis (``redis-py``'s asyncio client; a real ``redis-server``).

Layout, every key under one prefix ``P`` (default ``mcpr``):

- ``P:session:<id>`` hash ``{v, data}`` — ``data`` the record's JSON, ``v`` its version;
  ``P:sessions`` set of ids; ``P:token:<sha256>`` → session id (the token hash's claim).
- ``P:hold:<id>`` string (JSON) with a PX TTL; ``P:holds`` zset id → expiry (ms), so the limit
  check can drop expired ones first; ``P:holdmeta`` hash id → JSON (owner, revision).
- ``P:ledger`` hash ``{rev, digest}`` — the head of the revision ledger.
- ``P:member:<replica>`` string with a PX TTL (heartbeats); ``P:members`` set of ids.
- ``P:events`` stream (``MAXLEN ~`` bounded) — every write ``XADD``s its event inside the same
  Lua script, so the change and its announcement are one atomic step.
- ``P:rl:<rule>\x1f<scope value>`` hash ``{t, ts}`` — a rate limit's token bucket (ADR 0033),
  expiring once it would be full again.
- ``P:epoch`` — set once (``SET NX``) with a random value: a store that lost its data gets a
  new one, and a reader that sees it change reloads.

Every multi-key step (compare-and-set with the token claim and the session bound, hold limits,
the ledger) is one Lua script: Redis runs it without interleaving another client's command.
Time for hold expiry comes from the server (``TIME``), so replicas' clocks do not matter.

Unreachable Redis: each command is bounded by ``command_timeout_s`` (a SIGSTOPped server must
not hang a caller), and failures surface as :class:`StoreUnavailableError` — the caller decides,
never this module, and nothing falls back to memory."""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.cluster.store import (
    EVENT_LOG_MAX,
    Event,
    HoldLimits,
    HoldRecord,
    Member,
    SessionRecord,
    StoreUnavailableError,
    StreamGapError,
)
from mcp_reconciler.reconciler.errors import (
    ClusterConflictError,
    GrantError,
    HoldLimitError,
    HoldSlotsError,
    SessionLimitError,
)
from mcp_reconciler.reconciler.token_bucket import BucketSpec, Refusal

T = TypeVar("T")

# KEYS: session, sessions, token(new), events
# ARGV: data, expected, id, origin, max_sessions, maxlen, version, old token key or ""
_PUT_SESSION = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if cur ~= tonumber(ARGV[2]) then return {'conflict', cur} end
if cur == 0 then
  if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[5]) then return {'limit', 0} end
  if redis.call('EXISTS', KEYS[3]) == 1 then return {'token', 0} end
  redis.call('SET', KEYS[3], ARGV[3])
  redis.call('SADD', KEYS[2], ARGV[3])
elseif ARGV[8] ~= '' and ARGV[8] ~= KEYS[3] then
  if redis.call('EXISTS', KEYS[3]) == 1 then return {'token', 0} end
  redis.call('DEL', ARGV[8])
  redis.call('SET', KEYS[3], ARGV[3])
end
redis.call('HSET', KEYS[1], 'v', ARGV[7], 'data', ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*',
  'kind', 'session', 'key', ARGV[3], 'origin', ARGV[4], 'data', ARGV[1])
return {'ok', tonumber(ARGV[7])}
"""

# KEYS: session, sessions, events ; ARGV: id, origin, maxlen, token key prefix
_DELETE_SESSION = """
local data = redis.call('HGET', KEYS[1], 'data')
if not data then return 0 end
local rec = cjson.decode(data)
redis.call('DEL', ARGV[4] .. rec['token_hash'])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*',
  'kind', 'session_deleted', 'key', ARGV[1], 'origin', ARGV[2], 'data', '')
return 1
"""

# KEYS: holds zset, holdmeta, hold key, events
# ARGV: id, json, owner, revision, ttl_ms, max_holds, max_per_owner (-1: none), max_held_revs, origin, maxlen
_CREATE_HOLD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(expired) do redis.call('HDEL', KEYS[2], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local metas = redis.call('HVALS', KEYS[2])
if #metas >= tonumber(ARGV[6]) then return {'limit', ARGV[6]} end
local owned = 0
local held = {}
local nheld = 0
for _, raw in ipairs(metas) do
  local m = cjson.decode(raw)
  if m['owner'] == ARGV[3] then owned = owned + 1 end
  local r = tostring(m['revision'])
  if not held[r] then held[r] = true; nheld = nheld + 1 end
end
if tonumber(ARGV[7]) >= 0 and owned >= tonumber(ARGV[7]) then return {'owner', ARGV[7]} end
if not held[ARGV[4]] and nheld >= tonumber(ARGV[8]) then return {'slots', ARGV[8]} end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[5])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[10], '*',
  'kind', 'hold', 'key', ARGV[1], 'origin', ARGV[9], 'data', ARGV[2])
return {'ok', now}
"""

# KEYS: holds zset, holdmeta, hold key, events ; ARGV: id, origin, maxlen
_RELEASE_HOLD = """
local raw = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
local live = redis.call('DEL', KEYS[3])
if not raw or live == 0 then return false end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*',
  'kind', 'hold_released', 'key', ARGV[1], 'origin', ARGV[2], 'data', raw)
return raw
"""

# KEYS: ledger, events ; ARGV: digest, floor, origin, maxlen
_LEDGER_STEP = """
local head = redis.call('HMGET', KEYS[1], 'rev', 'digest')
if head[2] == ARGV[1] then return tonumber(head[1]) end
local rev = tonumber(head[1] or '0')
if tonumber(ARGV[2]) > rev then rev = tonumber(ARGV[2]) end
rev = rev + 1
redis.call('HSET', KEYS[1], 'rev', rev, 'digest', ARGV[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
  'kind', 'ledger', 'key', tostring(rev), 'origin', ARGV[3], 'data', ARGV[1])
return rev
"""

# Token buckets (reconciler/token_bucket.py's arithmetic, on the server's clock), all or none.
# KEYS: one hash {t, ts, } per bucket ; ARGV: rate1, burst1, rate2, burst2, ... (tokens/s, capacity)
# Returns {0, ''} when taken, else {index (1-based), retry-after seconds as a string}.
_TAKE_TOKENS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local levels = {}
local which, worst = 0, 0
for i = 1, #KEYS do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local held = redis.call('HMGET', KEYS[i], 't', 'ts')
  local level = burst
  if held[1] then level = math.min(burst, tonumber(held[1]) + (now - tonumber(held[2])) * rate) end
  if level < 1 then
    local wait = (1 - level) / rate
    if which == 0 or wait > worst then which, worst = i, wait end
  end
  levels[i] = level
end
if which > 0 then return {which, string.format('%.6f', worst)} end
for i = 1, #KEYS do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local left = levels[i] - 1
  redis.call('HSET', KEYS[i], 't', string.format('%.17g', left), 'ts', string.format('%.17g', now))
  -- gone once full again: a full bucket and no bucket are the same
  redis.call('PEXPIRE', KEYS[i], math.ceil((burst - left) / rate * 1000) + 1000)
end
return {0, ''}
"""

#: A limited call waits at most this long for the store (then ``fail: open|closed`` decides).
TAKE_TOKENS_TIMEOUT_S = 0.5


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisStore:
    """A :class:`~mcp_reconciler.reconciler.cluster.store.ClusterStore` on one Redis server.
    ``url`` is a ``redis://`` / ``rediss://`` URL (may carry a password: never logged here)."""

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "mcpr",
        command_timeout_s: float = 2.0,
        event_log_max: int = EVENT_LOG_MAX,
    ) -> None:
        self._url = url
        self._p = prefix
        self._timeout = command_timeout_s
        self._maxlen = event_log_max
        self._redis: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}

    def __repr__(self) -> str:  # never the URL: it may carry a password
        return f"<RedisStore prefix={self._p!r}>"

    def _k(self, *parts: str) -> str:
        return ":".join((self._p, *parts))

    @property
    def _r(self) -> aioredis.Redis:
        if self._redis is None:
            raise StoreUnavailableError("the Redis store is not connected")
        return self._redis

    async def _call(self, fn: Callable[[], Awaitable[T]], timeout_s: float | None = None) -> T:
        # The store's latency and errors by operation (the method that built ``fn``: a fixed set).
        parts = getattr(fn, "__qualname__", "call").split(".")
        op = parts[-3] if len(parts) >= 3 and parts[-2] == "<locals>" else parts[-1]
        started, outcome = anyio.current_time(), "ok"
        try:
            with anyio.fail_after(timeout_s if timeout_s is not None else self._timeout):
                return await fn()
        except TimeoutError:
            outcome = "timeout"
            raise StoreUnavailableError("the Redis store did not answer in time") from None
        except ResponseError as exc:
            outcome = "refused"
            raise StoreUnavailableError(f"the Redis store refused a command: {type(exc).__name__}") from None
        except (RedisError, OSError) as exc:
            outcome = "unreachable"
            await self._drop_idle_connections()
            raise StoreUnavailableError(f"the Redis store is unreachable: {type(exc).__name__}") from None
        finally:
            telemetry.cluster_store_duration.record(anyio.current_time() - started, {"op": op, "outcome": outcome})

    async def _drop_idle_connections(self) -> None:
        # One connection failed: the server may have restarted, and then every idle pooled
        # connection is dead too. Drop them all now, so the commands after the store comes back
        # open fresh connections instead of each failing once on a stale one.
        if self._redis is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._timeout):
                await self._redis.connection_pool.disconnect(inuse_connections=False)

    async def connect(self) -> None:
        """As :meth:`ClusterStore.connect`."""
        # No client-side retries: a failure must surface within the command bound, not later
        # (stale pooled connections are dropped by _call instead).
        self._redis = aioredis.Redis.from_url(
            self._url,
            socket_connect_timeout=self._timeout,
            socket_timeout=None,  # bounded per call by _call (a blocking XREAD waits longer)
            health_check_interval=0,
            retry_on_timeout=False,
        )
        r = self._redis
        self._scripts = {
            "put": r.register_script(_PUT_SESSION),
            "delete": r.register_script(_DELETE_SESSION),
            "hold": r.register_script(_CREATE_HOLD),
            "release": r.register_script(_RELEASE_HOLD),
            "ledger": r.register_script(_LEDGER_STEP),
            "tokens": r.register_script(_TAKE_TOKENS),
        }

    async def aclose(self) -> None:
        """As :meth:`ClusterStore.aclose`."""
        if self._redis is not None:
            redis, self._redis = self._redis, None
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._timeout):
                await redis.aclose()

    async def epoch(self) -> str:
        """As :meth:`ClusterStore.epoch`."""

        async def run() -> str:
            await self._r.set(self._k("epoch"), secrets.token_hex(8), nx=True)
            return _s(await self._r.get(self._k("epoch")))

        return await self._call(run)

    async def last_event_id(self) -> str:
        """As :meth:`ClusterStore.last_event_id`."""

        async def run() -> str:
            entries = await self._r.xrevrange(self._k("events"), count=1)
            return _s(entries[0][0]) if entries else "0-0"

        return await self._call(run)

    async def read_events(self, after: str, *, block_s: float, count: int = 256) -> list[Event]:
        """As :meth:`ClusterStore.read_events`."""
        key = self._k("events")

        async def run() -> list[Event]:
            # One round trip: is the reader's own entry still in the log (inclusive XRANGE), then
            # the blocking read. A trimmed or lost position is a gap, never silently skipped.
            pipe = self._r.pipeline(transaction=False)
            pipe.xrange(key, after, after, count=1)
            pipe.xread({key: after}, count=count, block=max(1, int(block_s * 1000)))
            mine, reply = await pipe.execute()
            if after != "0-0" and not mine:
                raise StreamGapError("the event log no longer has this replica's position")
            out: list[Event] = []
            for _stream, entries in reply or ():
                for event_id, fields in entries:
                    f = {_s(k): _s(v) for k, v in fields.items()}
                    out.append(
                        Event(_s(event_id), f.get("kind", ""), f.get("key", ""), f.get("origin", ""), f.get("data", ""))
                    )
            return out

        return await self._call(run, timeout_s=block_s + self._timeout)

    async def load_sessions(self) -> list[SessionRecord]:
        """As :meth:`ClusterStore.load_sessions`."""

        async def run() -> list[SessionRecord]:
            ids = sorted(_s(i) for i in await self._r.smembers(self._k("sessions")))
            if not ids:
                return []
            pipe = self._r.pipeline(transaction=False)
            for sid in ids:
                pipe.hget(self._k("session", sid), "data")
            raws = await pipe.execute()
            return [SessionRecord.from_json(raw) for raw in raws if raw]

        return await self._call(run, timeout_s=self._timeout * 5)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """As :meth:`ClusterStore.get_session`."""
        raw = await self._call(lambda: self._r.hget(self._k("session", session_id), "data"))
        return SessionRecord.from_json(raw) if raw else None

    async def session_for_token(self, token_hash: str) -> SessionRecord | None:
        """As :meth:`ClusterStore.session_for_token`."""
        sid = await self._call(lambda: self._r.get(self._k("token", token_hash)))
        return await self.get_session(_s(sid)) if sid else None

    async def put_session(self, record: SessionRecord, *, expected: int, origin: str, max_sessions: int) -> int:
        """As :meth:`ClusterStore.put_session`."""
        version = expected + 1
        stored = SessionRecord(**{**_fields(record), "version": version})
        old_token = ""
        if expected:
            current = await self.get_session(record.id)
            if current is not None and current.token_hash != record.token_hash:
                old_token = self._k("token", current.token_hash)
        keys = [
            self._k("session", record.id),
            self._k("sessions"),
            self._k("token", record.token_hash),
            self._k("events"),
        ]
        args = [stored.to_json(), expected, record.id, origin, max_sessions, self._maxlen, version, old_token]
        status, value = await self._call(lambda: self._scripts["put"](keys=keys, args=args))
        status = _s(status)
        if status == "conflict":
            raise ClusterConflictError(f"session {record.id}")
        if status == "limit":
            raise SessionLimitError(
                f"at most {max_sessions} sessions may exist (gateway.limits.sessions); delete unused sessions",
                bound="gateway.limits.sessions",
                limit=max_sessions,
            )
        if status == "token":
            raise GrantError("that token is already in use by another session")
        return int(value)

    async def delete_session(self, session_id: str, *, origin: str) -> bool:
        """As :meth:`ClusterStore.delete_session`."""
        keys = [self._k("session", session_id), self._k("sessions"), self._k("events")]
        args = [session_id, origin, self._maxlen, self._k("token", "")]
        return bool(await self._call(lambda: self._scripts["delete"](keys=keys, args=args)))

    async def create_hold(self, record: HoldRecord, *, limits: HoldLimits, origin: str) -> HoldRecord:
        """As :meth:`ClusterStore.create_hold`."""
        ttl_ms = max(1, int((record.expires_at - record.created_at) * 1000))
        keys = [self._k("holds"), self._k("holdmeta"), self._k("hold", record.id), self._k("events")]
        args = [
            record.id,
            record.to_json(),
            record.owner,
            str(record.revision),
            ttl_ms,
            limits.max_holds,
            -1 if limits.max_per_owner is None else limits.max_per_owner,
            limits.max_held_revisions,
            origin,
            self._maxlen,
        ]
        status, value = await self._call(lambda: self._scripts["hold"](keys=keys, args=args))
        status = _s(status)
        if status == "limit":
            raise HoldLimitError(
                f"at most {_s(value)} revision holds may exist (gateway.limits.holds); release one first",
                bound="gateway.limits.holds",
                limit=int(_s(value)),
            )
        if status == "owner":
            raise HoldLimitError(
                f"a principal may hold at most {_s(value)} revision holds (gateway.limits.holds_per_principal); "
                "release one first",
                bound="gateway.limits.holds_per_principal",
                limit=int(_s(value)),
            )
        if status == "slots":
            raise HoldSlotsError(
                f"holds may keep at most {_s(value)} revisions alive, so that they can never defer publication: "
                "hold one of the held revisions, or retry when a hold is released or expires"
            )
        return record

    async def release_hold(self, hold_id: str, *, origin: str) -> HoldRecord | None:
        """As :meth:`ClusterStore.release_hold`."""
        keys = [self._k("holds"), self._k("holdmeta"), self._k("hold", hold_id), self._k("events")]
        raw = await self._call(lambda: self._scripts["release"](keys=keys, args=[hold_id, origin, self._maxlen]))
        return HoldRecord.from_json(raw) if raw else None

    async def list_holds(self) -> list[HoldRecord]:
        """As :meth:`ClusterStore.list_holds`."""

        async def run() -> list[HoldRecord]:
            ids = [_s(i) for i in await self._r.zrange(self._k("holds"), 0, -1)]
            if not ids:
                return []
            raws = await self._r.mget([self._k("hold", i) for i in ids])
            return [HoldRecord.from_json(raw) for raw in raws if raw]

        return await self._call(run)

    async def ledger_step(self, digest: str, *, floor: int, origin: str) -> int:
        """As :meth:`ClusterStore.ledger_step`."""
        keys = [self._k("ledger"), self._k("events")]
        return int(
            await self._call(lambda: self._scripts["ledger"](keys=keys, args=[digest, floor, origin, self._maxlen]))
        )

    async def ledger_head(self) -> tuple[int, str] | None:
        """As :meth:`ClusterStore.ledger_head`."""
        rev, digest = await self._call(lambda: self._r.hmget(self._k("ledger"), ["rev", "digest"]))
        return (int(rev), _s(digest)) if rev is not None and digest is not None else None

    async def heartbeat(self, replica_id: str, info: Mapping[str, Any], *, ttl_s: float) -> None:
        """As :meth:`ClusterStore.heartbeat`."""

        async def run() -> None:
            pipe = self._r.pipeline(transaction=True)
            pipe.set(
                self._k("member", replica_id), json.dumps(dict(info), sort_keys=True), px=max(1, int(ttl_s * 1000))
            )
            pipe.sadd(self._k("members"), replica_id)
            await pipe.execute()

        await self._call(run)

    async def leave(self, replica_id: str) -> None:
        """As :meth:`ClusterStore.leave`."""

        async def run() -> None:
            pipe = self._r.pipeline(transaction=True)
            pipe.delete(self._k("member", replica_id))
            pipe.srem(self._k("members"), replica_id)
            await pipe.execute()

        await self._call(run)

    async def members(self) -> list[Member]:
        """As :meth:`ClusterStore.members`."""

        async def run() -> list[Member]:
            ids = sorted(_s(i) for i in await self._r.smembers(self._k("members")))
            if not ids:
                return []
            raws = await self._r.mget([self._k("member", i) for i in ids])
            gone = [rid for rid, raw in zip(ids, raws, strict=True) if raw is None]
            if gone:
                await self._r.srem(self._k("members"), *gone)
            return [Member(rid, json.loads(raw)) for rid, raw in zip(ids, raws, strict=True) if raw is not None]

        return await self._call(run)

    async def announce(self, kind: str, key: str, *, origin: str, data: str = "") -> str:
        """As :meth:`ClusterStore.announce`."""
        fields = {"kind": kind, "key": key, "origin": origin, "data": data}
        return _s(
            await self._call(
                lambda: self._r.xadd(self._k("events"), fields, maxlen=self._maxlen, approximate=True)  # type: ignore[arg-type]
            )
        )

    async def take_tokens(self, specs: Sequence[BucketSpec]) -> Refusal | None:
        """As :meth:`ClusterStore.take_tokens`: one ``EVALSHA`` (one round trip), bounded by
        :data:`TAKE_TOKENS_TIMEOUT_S`."""
        keys = [self._k("rl", spec.key) for spec in specs]
        args: list[float] = []
        for spec in specs:
            args += (spec.rate, spec.burst)
        which, wait = await self._call(
            lambda: self._scripts["tokens"](keys=keys, args=args), timeout_s=min(self._timeout, TAKE_TOKENS_TIMEOUT_S)
        )
        return None if int(which) == 0 else Refusal(int(which) - 1, float(_s(wait)))


def _fields(record: SessionRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in SessionRecord.__dataclass_fields__}
