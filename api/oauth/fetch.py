"""Bounded JSON over HTTP for the authorization-server side (metadata, JWKS, introspection).

An authorization server is trusted for its keys, not for its manners: every fetch has a total
deadline (not only per-read timeouts, so a server trickling bytes cannot hold a validation open),
a byte cap enforced while streaming (a declared ``Content-Length`` over the cap is refused before
reading), no redirects, and must answer 200 with a JSON object. Errors are :class:`FetchError`
with a short, sanitized reason (status code or exception type; never a body, which might echo
credentials).

Uses ``httpx2``, the HTTP client underneath ``mcp``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio
import httpx2

__all__ = ["FetchError", "fetch_json"]


class FetchError(Exception):
    """A fetch that did not produce a JSON object within its bounds; ``str()`` is safe to log."""


async def fetch_json(
    client: httpx2.AsyncClient,
    url: str,
    *,
    max_bytes: int,
    timeout_s: float,
    method: str = "GET",
    data: Mapping[str, str] | None = None,
    auth: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """``url``'s JSON object, or :class:`FetchError`. At most ``max_bytes`` are read and the
    whole exchange (connect to last byte) takes at most ``timeout_s``."""
    try:
        with anyio.fail_after(timeout_s):
            async with client.stream(
                method,
                url,
                data=data,
                auth=auth,
                headers={"Accept": "application/json"},
                follow_redirects=False,
                timeout=timeout_s,
            ) as response:
                if response.status_code != 200:
                    raise FetchError(f"HTTP {response.status_code}")
                declared = response.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                    raise FetchError(f"response larger than {max_bytes} bytes")
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise FetchError(f"response larger than {max_bytes} bytes")
                    chunks.append(chunk)
    except TimeoutError:
        raise FetchError(f"no complete answer within {timeout_s:g} s") from None
    except httpx2.HTTPError as exc:
        raise FetchError(type(exc).__name__) from None
    try:
        value = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError):
        raise FetchError("not JSON") from None
    if not isinstance(value, dict):
        raise FetchError("not a JSON object")
    return value
