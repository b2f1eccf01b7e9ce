"""``/ui`` over real HTTP, without a browser: the page and its files carry the security headers
(a CSP without unsafe-inline, nosniff, no-referrer, no framing, no caching), unknown files answer
404, and the Host/Origin check of ``/v1`` covers ``/ui`` (421 foreign Host, 403 foreign Origin).
The page holds no data: a request without a token gets the same shell, and the shell contains no
inline script or style (the CSP would refuse them; ``tests/ui`` shows the page works under it)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx2
import pytest

from tests.api.conftest import WAIT, served_gateway, write_config

pytestmark = pytest.mark.anyio


async def test_console_files_carry_the_security_headers(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
            redirect = await http.get("/ui")
            assert redirect.status_code == 308 and redirect.headers["location"] == "/ui/"
            for path, kind in (
                ("/ui/", "text/html"),
                ("/ui/app.js", "text/javascript"),
                ("/ui/app.css", "text/css"),
                ("/ui/favicon.svg", "image/svg+xml"),
            ):
                r = await http.get(path)
                assert r.status_code == 200 and r.headers["content-type"].startswith(kind), path
                csp = r.headers["content-security-policy"]
                assert "script-src 'self'" in csp and "style-src 'self'" in csp and "default-src 'none'" in csp
                assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
                assert "form-action 'none'" in csp and "frame-ancestors 'none'" in csp
                assert r.headers["x-content-type-options"] == "nosniff"
                assert r.headers["referrer-policy"] == "no-referrer"
                assert r.headers["cache-control"] == "no-store"
                assert "set-cookie" not in r.headers
            page = (await http.get("/ui/")).text
            assert not re.search(r"<script(?![^>]*\bsrc=)", page)  # no inline script
            assert "<style" not in page and " style=" not in page  # no inline style
            assert not re.search(r"<input[^>]*\bname=", page)  # the token input has no name: never submitted
            missing = await http.get("/ui/../v1/status")
            assert missing.status_code in (404, 401)
            assert (await http.get("/ui/secrets.txt")).status_code == 404
            assert (await http.post("/ui/")).status_code == 405


async def test_console_is_behind_the_host_and_origin_check(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
            assert (await http.get("/ui/", headers={"Host": "evil.example"})).status_code == 421
            assert (await http.get("/ui/app.js", headers={"Origin": "http://evil.example"})).status_code == 403
            same = await http.get("/ui/", headers={"Origin": served.base_url})
            assert same.status_code == 200
