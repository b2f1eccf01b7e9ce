"""An issuer's signing keys: discovered, fetched, filtered, cached and refreshed within bounds.

Policy (ADR 0011; numbers from :class:`~reconciler.oauth_config.JwksPolicy`):

* **Discovery.** ``jwks_url`` if configured, else ``jwks_uri`` from the issuer's metadata:
  ``metadata_url`` if configured, else RFC 8414 ``/.well-known/oauth-authorization-server``
  (path-inserted) and then OpenID ``/.well-known/openid-configuration``. The metadata must name
  this exact issuer, or it is not used (RFC 8414 §3.3: a metadata document that vouches for
  another issuer is a mix-up attack). A discovered URL is kept until a JWKS fetch fails.
* **Freshness.** Keys younger than ``refresh_interval_s`` are used as they are. Older keys are
  refetched by the next validation that needs them. If the refetch fails, keys younger than
  ``max_stale_s`` keep working; older keys are never used (fail closed: 503, not "valid").
* **Rotation.** A token whose ``kid`` is not in the set triggers a refetch, at most once per
  ``min_refetch_interval_s`` (failed attempts count too), so a stream of tokens with made-up key
  ids costs the issuer one request per interval, not one per token.
* **Single flight.** Concurrent validations that need a refetch share one: a caller that waited
  for the lock while another attempt ran uses that attempt's outcome instead of starting its own.
  Under any load the issuer sees at most one fetch per refresh interval (plus rotations).
* **Hygiene.** At most ``max_keys`` keys and ``max_bytes`` bytes per document (more is a failed
  fetch, not a truncated set). Only signature keys (``use`` absent or ``sig``; ``key_ops``
  absent or containing ``verify``) of kty RSA (≥ 2048 bits), EC or OKP are kept, private members
  stripped. A key is usable only with algorithms of its own family (RSA: RS*/PS*; EC: the ES*
  of its curve; OKP: EdDSA), and only with its own ``alg`` when it declares one: no symmetric
  key ever exists here, so ``HS256`` "signed" with a public key cannot verify.

Nothing here logs a token; fetch failures log the issuer (configured, not from a token) and a
sanitized reason."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from mcp_reconciler.api.oauth.challenge import AuthFailure
from mcp_reconciler.api.oauth.fetch import FetchError, fetch_json
from mcp_reconciler.reconciler.oauth_config import IssuerConfig, JwksPolicy, is_loopback_url
from mcp_reconciler.reconciler.telemetry import meter, tracer

__all__ = ["IssuerKeys", "KeySet", "algorithm_fits", "metadata_urls"]

log = logging.getLogger("mcp_reconciler.oauth")

jwks_fetches = meter.create_counter("oauth.jwks.fetches", description="JWKS fetch attempts, by outcome")

MIN_RSA_BITS = 2048
_METADATA_MAX_BYTES = 64 * 1024
_PUBLIC_MEMBERS = {
    "RSA": ("n", "e"),
    "EC": ("crv", "x", "y"),
    "OKP": ("crv", "x"),
}
_COMMON_MEMBERS = ("kty", "kid", "alg", "use", "key_ops")
_EC_ALGORITHMS = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}


def algorithm_fits(alg: str, jwk: Mapping[str, Any]) -> bool:
    """Whether a key of this type/curve may verify ``alg`` (and its own ``alg``, if declared, is ``alg``)."""
    declared = jwk.get("alg")
    if declared is not None and declared != alg:
        return False
    kty = jwk.get("kty")
    if alg[:2] in ("RS", "PS"):
        return kty == "RSA"
    if alg in _EC_ALGORITHMS:
        return kty == "EC" and jwk.get("crv") == _EC_ALGORITHMS[alg]
    if alg == "EdDSA":
        return kty == "OKP" and jwk.get("crv") in ("Ed25519", "Ed448")
    return False


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may live: RFC 8414 (path-inserted), then OpenID Connect
    Discovery (path-appended; for a path issuer also the RFC 8414-style OIDC form)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(p: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, p, "", ""))

    urls = [at(f"/.well-known/oauth-authorization-server{path}"), at(f"{path}/.well-known/openid-configuration")]
    if path:
        urls.append(at(f"/.well-known/openid-configuration{path}"))
    return urls


@dataclass(frozen=True, slots=True)
class KeySet:
    """One fetched JWKS after filtering: verification keys per key id and per algorithm.
    ``unnamed`` holds keys without a ``kid``. ``fetched_at`` is monotonic seconds."""

    by_kid: Mapping[str, Mapping[str, PyJWK]]
    unnamed: tuple[Mapping[str, PyJWK], ...]
    fetched_at: float
    size: int = field(default=0)

    def candidates(self, kid: str | None, alg: str) -> tuple[list[PyJWK], bool]:
        """(keys that may verify a token with this ``kid``/``alg``, whether ``kid`` is known)."""
        if kid is not None and kid in self.by_kid:
            key = self.by_kid[kid].get(alg)
            return ([key] if key is not None else []), True
        found = [keys[alg] for keys in self.unnamed if alg in keys]
        if kid is None:
            found += [keys[alg] for keys in self.by_kid.values() if alg in keys]
        return found, kid is None or bool(found)


def _b64len_bits(value: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (ValueError, TypeError):
        return 0
    return int.from_bytes(raw, "big").bit_length()


def _parse(document: Mapping[str, Any], algorithms: tuple[str, ...], max_keys: int, now: float) -> KeySet:
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise FetchError("no 'keys' list")
    if len(keys) > max_keys:
        raise FetchError(f"{len(keys)} keys, more than the limit of {max_keys}")
    by_kid: dict[str, dict[str, PyJWK]] = {}
    unnamed: list[dict[str, PyJWK]] = []
    skipped = 0
    for raw in keys:
        usable = _usable(raw)
        if usable is None:
            skipped += 1
            continue
        verifiers: dict[str, PyJWK] = {}
        for alg in algorithms:
            if algorithm_fits(alg, usable):
                try:
                    verifiers[alg] = PyJWK(dict(usable), algorithm=alg)
                except PyJWTError:
                    continue
        if not verifiers:
            skipped += 1
            continue
        kid = usable.get("kid")
        if isinstance(kid, str):
            by_kid[kid] = verifiers
        else:
            unnamed.append(verifiers)
    if skipped:
        log.debug("JWKS: %d key(s) not usable for signature verification were skipped", skipped)
    return KeySet(by_kid, tuple(unnamed), now, size=len(by_kid) + len(unnamed))


def _usable(raw: Any) -> dict[str, Any] | None:
    """The public, signature-only form of one JWK, or ``None`` if it is not one."""
    if not isinstance(raw, dict):
        return None
    kty = raw.get("kty")
    if kty not in _PUBLIC_MEMBERS:
        return None  # "oct" (symmetric) among them: never
    if raw.get("use") not in (None, "sig"):
        return None
    ops = raw.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return None
    members = (*_COMMON_MEMBERS, *_PUBLIC_MEMBERS[kty])
    public = {k: raw[k] for k in members if k in raw}
    if not all(isinstance(public.get(k), str) for k in _PUBLIC_MEMBERS[kty]):
        return None
    if kty == "RSA" and _b64len_bits(public["n"]) < MIN_RSA_BITS:
        return None
    return public


class IssuerKeys:
    """The signing keys of one issuer, kept per the module's policy.

    :meth:`keys_for` is the only entry point; it raises :class:`AuthFailure` (``unknown_key`` or
    ``keys_unavailable``). ``fetches`` counts JWKS fetch attempts and ``discoveries`` metadata
    fetches (observability and tests). ``clock`` is monotonic seconds (injectable for tests)."""

    def __init__(
        self,
        issuer: IssuerConfig,
        policy: JwksPolicy,
        http: httpx2.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.policy = policy
        self._http = http
        self._clock = clock
        self._keys: KeySet | None = None
        self._jwks_url: str | None = issuer.jwks_url
        self._lock = anyio.Lock()
        self._completed = 0  # attempts finished (ok or not): the single-flight generation
        self._last_attempt: float | None = None
        self.fetches = 0
        self.discoveries = 0

    @property
    def current(self) -> KeySet | None:
        """The key set last fetched successfully, or None before the first success (a failed refetch keeps it)."""
        return self._keys

    def _may_attempt(self, now: float) -> bool:
        """Whether a refetch may start now, or one is running that we can wait for."""
        if self._lock.locked():
            return True  # an attempt is in flight: waiting for it costs the issuer nothing
        last = self._last_attempt
        return last is None or now - last >= self.policy.min_refetch_interval_s

    async def keys_for(self, kid: str | None, alg: str) -> list[PyJWK]:
        """The keys that may verify a token with header ``kid``/``alg`` (several only when the
        token names no key id). Refetches when the set is stale or the kid is unknown, within
        the policy's bounds; joins a refetch already in flight instead of starting another."""
        now = self._clock()
        keys = self._keys
        if (keys is None or now - keys.fetched_at >= self.policy.refresh_interval_s) and self._may_attempt(now):
            await self._refresh(self._completed)
            keys = self._keys
            now = self._clock()
        if keys is None or now - keys.fetched_at > self.policy.max_stale_s:
            raise AuthFailure("keys_unavailable")
        found, known = keys.candidates(kid, alg)
        if not known and self._may_attempt(now):
            await self._refresh(self._completed)  # rotation: the issuer may have published a new key
            keys = self._keys
            assert keys is not None
            if self._clock() - keys.fetched_at > self.policy.max_stale_s:
                raise AuthFailure("keys_unavailable")
            found, known = keys.candidates(kid, alg)
        if not found:
            raise AuthFailure("unknown_key")
        return found

    async def _refresh(self, seen_completed: int) -> None:
        """One fetch for everyone who asked while it was pending or running (single flight):
        a caller that finds an attempt completed since it looked uses that attempt's outcome."""
        async with self._lock:
            if self._completed != seen_completed:
                return
            self._last_attempt = self._clock()
            try:
                await self._attempt()
            finally:
                self._completed += 1

    async def _attempt(self) -> None:
        """One fetch; a failure keeps the current keys (their staleness bound decides)."""
        with tracer.start_as_current_span("oauth.jwks.fetch") as span:
            span.set_attribute("oauth.issuer", self.issuer.issuer)
            try:
                keys = await self._fetch()
            except FetchError as exc:
                jwks_fetches.add(1, {"outcome": "error"})
                span.set_attribute("oauth.error", str(exc))
                cached = self._keys
                age = "none cached" if cached is None else f"cached: {self._clock() - cached.fetched_at:.0f} s old"
                log.warning("JWKS of issuer %s could not be fetched (%s); %s", self.issuer.issuer, exc, age)
                if self.issuer.jwks_url is None:
                    self._jwks_url = None  # rediscover next time: the metadata may have moved it
                return
            jwks_fetches.add(1, {"outcome": "ok"})
            span.set_attribute("oauth.jwks.keys", keys.size)
            self._keys = keys

    async def _fetch(self) -> KeySet:
        url = self._jwks_url or await self._discover()
        self._jwks_url = url
        self.fetches += 1
        document = await fetch_json(
            self._http, url, max_bytes=self.policy.max_bytes, timeout_s=self.policy.fetch_timeout_s
        )
        return _parse(document, self.issuer.algorithms, self.policy.max_keys, self._clock())

    async def _discover(self) -> str:
        candidates = [self.issuer.metadata_url] if self.issuer.metadata_url else metadata_urls(self.issuer.issuer)
        reasons: list[str] = []
        for url in candidates:
            self.discoveries += 1
            try:
                metadata = await fetch_json(
                    self._http, url, max_bytes=_METADATA_MAX_BYTES, timeout_s=self.policy.fetch_timeout_s
                )
            except FetchError as exc:
                reasons.append(str(exc))
                continue
            if str(metadata.get("issuer", "")).rstrip("/") != self.issuer.issuer.rstrip("/"):
                raise FetchError("the metadata names another issuer")
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str) or urlsplit(jwks_uri).scheme not in ("https", "http"):
                raise FetchError("the metadata has no usable jwks_uri")
            if urlsplit(jwks_uri).scheme == "http" and not is_loopback_url(jwks_uri):
                raise FetchError("the metadata's jwks_uri is not https")
            return jwks_uri
        raise FetchError("metadata discovery failed: " + "; ".join(reasons))
