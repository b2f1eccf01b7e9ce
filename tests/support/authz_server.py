"""A local OAuth 2.1 authorization server for tests: real HTTP on 127.0.0.1, keys per test run.

    async with authz_server(audience="http://127.0.0.1:9/mcp") as az:
        token = az.mint("alice", scope="mcp")          # a signed JWT access token
        az.rotate("ES256")                              # publish a new key and sign with it
        az.jwks_down = True                             # the JWKS endpoint answers 503
        az.jwks_fetches                                 # how often keys were fetched

Served (Starlette under uvicorn, in the test's event loop, on a socket bound before the app
starts, so it accepts connections as soon as the block is entered):

- ``/.well-known/oauth-authorization-server[/<path>]`` (RFC 8414) and
  ``[<path>]/.well-known/openid-configuration``: metadata naming every endpoint below;
- ``/jwks``: the published public keys (``jwks_down`` → 503; ``jwks_gate`` holds answers until
  the test sets it; ``jwks_fetches`` counts requests, ``jwks_requested`` is set by the first);
- ``/token``: ``client_credentials`` (``client_secret_basic`` or ``_post``), ``authorization_code``
  with PKCE S256, ``refresh_token``; ``resource`` (RFC 8707) becomes the token's ``aud``;
  ``token_requests`` counts requests per grant type;
- ``/register``: dynamic client registration (RFC 7591), public or confidential clients;
- ``/authorize``: auto-approves (no login page) and redirects with ``code``, ``state`` and
  ``iss`` (RFC 9207), for the official MCP SDK's OAuth client;
- ``/introspect``: RFC 7662 for opaque tokens from :meth:`AuthorizationServer.mint_opaque`.

Keys (RSA 2048, EC P-256/P-384, Ed25519) are generated when first needed in a test process and
reused by later servers of the same run; :meth:`AuthorizationServer.new_key` always makes a
fresh one. Nothing here is for production: no consent, no user accounts."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import anyio
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.support.asgi_server import listening_socket, serve_app

_kids = itertools.count(1)
_servers = itertools.count()
_pool: dict[tuple[str, int], Any] = {}
POOL_SLOTS = 4  # servers alive at the same time get distinct keys


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: str
    private: Any
    jwk: dict[str, Any]  # public


def _generate(alg: str) -> Any:
    if alg[:2] in ("RS", "PS"):
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if alg == "ES384":
        return ec.generate_private_key(ec.SECP384R1())
    if alg == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(alg)


def public_jwk(private: Any, *, kid: str | None, alg: str | None) -> dict[str, Any]:
    """The public JWK of ``private`` (with ``kid``/``alg`` when given)."""
    public = private.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
    jwk = {k: v for k, v in jwk.items() if k not in ("kid", "alg")}
    if kid is not None:
        jwk["kid"] = kid
    if alg is not None:
        jwk["alg"] = alg
    jwk["use"] = "sig"
    return jwk


def make_key(alg: str = "RS256", *, fresh: bool = False, declare_alg: bool = True, slot: int = 0) -> SigningKey:
    """A signing key for ``alg``: from this run's pool (``slot``), or newly generated with ``fresh``."""
    family = "RSA" if alg[:2] in ("RS", "PS") else alg
    private = _generate(alg) if fresh else _pool.get((family, slot))
    if private is None:
        private = _pool[(family, slot)] = _generate(alg)
    kid = f"k{next(_kids)}-{alg.lower()}"
    return SigningKey(kid, alg, private, public_jwk(private, kid=kid, alg=alg if declare_alg else None))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class AuthorizationServer:
    """State and behaviour of the fixture; see the module doc. Tests read the counters and flip
    the switches (``jwks_down``, ``token_lifetime_s``, ``signing``) directly."""

    def __init__(self, port: int, *, issuer_path: str = "", audience: str | None = None, alg: str = "RS256") -> None:
        self.base_url = f"http://127.0.0.1:{port}"
        self.issuer = self.base_url + issuer_path
        self.issuer_path = issuer_path
        self.audience = audience  # aud when a token request names no resource
        self.jwks_url = f"{self.base_url}/jwks"
        self.token_url = f"{self.base_url}/token"
        self.introspection_url = f"{self.base_url}/introspect"
        self.metadata_url = f"{self.base_url}/.well-known/oauth-authorization-server{issuer_path}"
        self.signing = make_key(alg, slot=next(_servers) % POOL_SLOTS)
        self.published: list[SigningKey] = [self.signing]
        self.extra_jwks: list[dict[str, Any]] = []  # raw entries appended to /jwks (hostile keys)
        self.jwks_down = False
        self.jwks_gate: anyio.Event | None = None  # set: /jwks answers only once the test opens it
        self.jwks_requested = anyio.Event()  # set by the first /jwks request
        self.token_lifetime_s = 300
        self.token_response_extra: dict[str, Any] = {}  # merged into every /token answer
        self.login_subject = "alice"
        self.jwks_fetches = 0
        self.metadata_fetches = 0
        self.introspections = 0
        self.token_requests: Counter[str] = Counter()
        self.issued: list[str] = []  # access tokens handed out by /token, in order
        self.clients: dict[str, dict[str, Any]] = {}
        self._codes: dict[str, dict[str, Any]] = {}
        self._refresh: dict[str, dict[str, Any]] = {}
        self._opaque: dict[str, dict[str, Any]] = {}
        self.app = Starlette(routes=self._routes())

    # -- tokens -------------------------------------------------------------------------------

    def mint(
        self,
        sub: str | None = "alice",
        *,
        scope: str | None = None,
        aud: str | list[str] | None = None,
        exp_in: float | None = 300,
        nbf_in: float | None = None,
        iss: str | None = None,
        key: SigningKey | None = None,
        alg: str | None = None,
        kid: str | None = "",
        typ: str | None = "at+jwt",
        claims: dict[str, Any] | None = None,
    ) -> str:
        """A signed JWT access token. ``kid=""`` means the signing key's kid, ``None`` none;
        ``exp_in=None`` omits ``exp``."""
        key = key or self.signing
        now = int(time.time())
        payload: dict[str, Any] = {"iss": iss or self.issuer, "iat": now, "jti": secrets.token_hex(8)}
        if sub is not None:
            payload["sub"] = sub
        audience = aud if aud is not None else self.audience
        if audience is not None:
            payload["aud"] = audience
        if exp_in is not None:
            payload["exp"] = now + int(exp_in)
        if nbf_in is not None:
            payload["nbf"] = now + int(nbf_in)
        if scope is not None:
            payload["scope"] = scope
        payload.update(claims or {})
        headers: dict[str, Any] = {}
        if typ is not None:
            headers["typ"] = typ
        if kid == "":
            headers["kid"] = key.kid
        elif kid is not None:
            headers["kid"] = kid
        return jwt.encode(payload, key.private, algorithm=alg or key.alg, headers=headers)

    def mint_opaque(
        self, sub: str = "alice", *, scope: str = "", aud: str | None = None, exp_in: float = 300, active: bool = True
    ) -> str:
        """An opaque token only ``/introspect`` knows."""
        token = secrets.token_urlsafe(24)
        self._opaque[token] = {
            "active": active,
            "sub": sub,
            "scope": scope,
            "aud": aud if aud is not None else self.audience,
            "iss": self.issuer,
            "exp": int(time.time() + exp_in),
            "client_id": "opaque-client",
        }
        return token

    def new_key(self, alg: str = "RS256", *, publish: bool = True, declare_alg: bool = True) -> SigningKey:
        key = make_key(alg, fresh=True, declare_alg=declare_alg)
        if publish:
            self.published.append(key)
        return key

    def rotate(self, alg: str = "RS256") -> SigningKey:
        """Publish a fresh key and sign with it from now on (the old one stays published)."""
        self.signing = self.new_key(alg)
        return self.signing

    def retire(self, key: SigningKey) -> None:
        self.published = [k for k in self.published if k.kid != key.kid]

    def add_client(self, client_id: str, secret: str | None, **metadata: Any) -> None:
        self.clients[client_id] = {"client_secret": secret, **metadata}

    def _access_token(self, sub: str, client_id: str, scope: str, aud: str | None) -> dict[str, Any]:
        token = self.mint(
            sub, scope=scope or None, aud=aud, exp_in=self.token_lifetime_s, claims={"client_id": client_id}
        )
        self.issued.append(token)
        return {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self.token_lifetime_s,
            **({"scope": scope} if scope else {}),
            **self.token_response_extra,
        }

    # -- HTTP -----------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.base_url}/authorize",
            "token_endpoint": self.token_url,
            "registration_endpoint": f"{self.base_url}/register",
            "introspection_endpoint": self.introspection_url,
            "jwks_uri": self.jwks_url,
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            "authorization_response_iss_parameter_supported": True,
        }

    def _routes(self) -> list[Route]:
        p = self.issuer_path
        return [
            Route(f"/.well-known/oauth-authorization-server{p}", self._metadata, methods=["GET"]),
            Route(f"{p}/.well-known/openid-configuration", self._metadata, methods=["GET"]),
            Route("/jwks", self._jwks, methods=["GET"]),
            Route("/token", self._token, methods=["POST"]),
            Route("/register", self._register, methods=["POST"]),
            Route("/authorize", self._authorize, methods=["GET"]),
            Route("/introspect", self._introspect, methods=["POST"]),
        ]

    async def _metadata(self, request: Request) -> Response:
        self.metadata_fetches += 1
        return JSONResponse(self.metadata())

    async def _jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        self.jwks_requested.set()
        if self.jwks_gate is not None:
            await self.jwks_gate.wait()
        if self.jwks_down:
            return JSONResponse({"error": "down"}, status_code=503)
        return JSONResponse({"keys": [k.jwk for k in self.published] + self.extra_jwks})

    def _client(self, request: Request, form: Any) -> tuple[str | None, bool]:
        """(client id, whether it authenticated as registered)."""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("basic "):
            raw = base64.b64decode(header[6:]).decode()
            client_id, _, secret = raw.partition(":")
            from urllib.parse import unquote

            client_id, secret = unquote(client_id), unquote(secret)
        else:
            client_id, secret = form.get("client_id"), form.get("client_secret")
        client = self.clients.get(client_id or "")
        if client is None:
            return client_id, False
        expected = client.get("client_secret")
        return client_id, expected is None or (secret is not None and secrets.compare_digest(secret, expected))

    async def _token(self, request: Request) -> Response:
        form = await request.form()
        grant = str(form.get("grant_type", ""))
        self.token_requests[grant] += 1
        client_id, ok = self._client(request, form)
        if not ok or client_id is None:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        resource = form.get("resource") or form.get("audience")
        aud = str(resource) if resource else None
        if grant == "client_credentials":
            return JSONResponse(self._access_token(client_id, client_id, str(form.get("scope", "")), aud))
        if grant == "authorization_code":
            code = self._codes.pop(str(form.get("code", "")), None)
            verifier = str(form.get("code_verifier", ""))
            if code is None or code["client_id"] != client_id or code["redirect_uri"] != form.get("redirect_uri"):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            if b64url(hashlib.sha256(verifier.encode()).digest()) != code["challenge"]:
                return JSONResponse({"error": "invalid_grant", "error_description": "PKCE"}, status_code=400)
            answer = self._access_token(self.login_subject, client_id, code["scope"], aud or code["resource"])
            refresh = secrets.token_urlsafe(16)
            self._refresh[refresh] = {**code}
            return JSONResponse({**answer, "refresh_token": refresh})
        if grant == "refresh_token":
            previous = self._refresh.get(str(form.get("refresh_token", "")))
            if previous is None or previous["client_id"] != client_id:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            return JSONResponse(
                self._access_token(self.login_subject, client_id, previous["scope"], aud or previous["resource"])
            )
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

    async def _register(self, request: Request) -> Response:
        body = await request.json()
        method = body.get("token_endpoint_auth_method", "client_secret_post")
        client_id = f"dcr-{secrets.token_hex(6)}"
        secret = None if method == "none" else secrets.token_urlsafe(24)
        self.add_client(client_id, secret, redirect_uris=body.get("redirect_uris", []))
        info = {**body, "client_id": client_id, "client_id_issued_at": int(time.time())}
        info["token_endpoint_auth_method"] = method
        if secret is not None:
            info["client_secret"] = secret
        return JSONResponse(info, status_code=201)

    async def _authorize(self, request: Request) -> Response:
        q = request.query_params
        client = self.clients.get(q.get("client_id", ""))
        redirect_uri = q.get("redirect_uri", "")
        if client is None or redirect_uri not in client.get("redirect_uris", []):
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return JSONResponse(
                {"error": "invalid_request", "error_description": "PKCE S256 required"}, status_code=400
            )
        code = secrets.token_urlsafe(16)
        self._codes[code] = {
            "client_id": q["client_id"],
            "redirect_uri": redirect_uri,
            "challenge": q["code_challenge"],
            "scope": q.get("scope", ""),
            "resource": q.get("resource"),
        }
        params = {"code": code, "iss": self.issuer}
        if q.get("state") is not None:
            params["state"] = q["state"]
        return RedirectResponse(f"{redirect_uri}?{urlencode(params)}", status_code=302)

    async def _introspect(self, request: Request) -> Response:
        self.introspections += 1
        form = await request.form()
        _, ok = self._client(request, form)
        if not ok:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        found = self._opaque.get(str(form.get("token", "")))
        return JSONResponse(found if found is not None else {"active": False})


@contextlib.asynccontextmanager
async def authz_server(**kw: Any) -> AsyncIterator[AuthorizationServer]:
    """Serve an :class:`AuthorizationServer` on 127.0.0.1:<ephemeral> for the block."""
    sock = listening_socket()  # accepting (queued by the kernel) before uvicorn's loop picks it up
    server_state = AuthorizationServer(sock.getsockname()[1], **kw)
    async with serve_app(server_state.app, sock):
        yield server_state


def forge_hs256(token_claims: dict[str, Any], secret: bytes, *, kid: str | None = None) -> str:
    """An HS256 token "signed" with ``secret`` (e.g. an issuer's public key PEM: the
    key-confusion forgery). Built by hand: PyJWT refuses to sign with an asymmetric key."""
    import hmac

    header: dict[str, Any] = {"alg": "HS256", "typ": "at+jwt"}
    if kid is not None:
        header["kid"] = kid
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(token_claims).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def unsigned(token_claims: dict[str, Any]) -> str:
    """An ``alg: none`` token."""
    header = {"alg": "none", "typ": "at+jwt"}
    return f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(token_claims).encode())}."
