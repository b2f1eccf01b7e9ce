"""A raw HTTP/1.1 client on one keep-alive socket, for timing what a server takes to answer: the
time from the request's first byte written to the answer's last byte read, with no client library
and no parsing inside the timed span.

The answer's end is found the way HTTP frames it: ``Content-Length`` bytes, or the last chunk of
a chunked body (how an SSE stream that ends — a 2025-era request's stream — arrives). Chunk
sizes are read as the bytes arrive (offsets only); the body is joined and the JSON parsed only
after the clock stopped, by :func:`answer_of` — the client's own work, timed on its own.

Blocking I/O on purpose: the lists are timed one at a time, and a blocked ``recv`` woken by the
kernel is the least a client can add. Imported by the bench scripts with ``bench/`` on
``sys.path``; nothing here prints or asserts."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any

RECV = 256 * 1024


@dataclass(frozen=True)
class Answer:
    """One response: status, headers (lower-case names), the raw body as received (chunked
    framing included when ``chunked``) and the seconds from the request's first byte to the
    answer's last."""

    status: int
    headers: dict[str, str]
    raw: bytes
    chunked: bool
    seconds: float

    def body(self) -> bytes:
        """The body without its chunked framing."""
        if not self.chunked:
            return self.raw
        out: list[bytes] = []
        pos = 0
        while True:
            eol = self.raw.index(b"\r\n", pos)
            size = int(self.raw[pos:eol].split(b";", 1)[0], 16)
            if size == 0:
                return b"".join(out)
            out.append(self.raw[eol + 2 : eol + 2 + size])
            pos = eol + 2 + size + 2


class RawHTTP:
    """One keep-alive connection to ``host:port`` (``TCP_NODELAY``, as every HTTP client sets it)."""

    def __init__(self, host: str, port: int, timeout: float = 60.0) -> None:
        self._host = f"{host}:{port}"
        self._address = (host, port)
        self._timeout = timeout
        self._sock = self._connect()
        self._buf = bytearray()  # bytes read past the last answer (none with a well-behaved server)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self._address, timeout=self._timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def close(self) -> None:
        self._sock.close()

    def post(self, path: str, headers: dict[str, str], body: bytes) -> Answer:
        """POST ``body`` and read the whole answer (see the module docstring for what is timed).
        A connection the server closed while idle (its keep-alive timeout) is opened again and
        the request sent once more, as HTTP clients do; that answer's time includes the connect."""
        try:
            return self._post(path, headers, body)
        except ConnectionError:
            if self._buf:
                raise
            self._sock.close()
            self._sock = self._connect()
            return self._post(path, headers, body)

    def _post(self, path: str, headers: dict[str, str], body: bytes) -> Answer:
        lines = [f"POST {path} HTTP/1.1", f"host: {self._host}", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        buf = self._buf
        recv = self._sock.recv
        start = time.perf_counter()
        self._sock.sendall(request)
        while (end := buf.find(b"\r\n\r\n")) < 0:
            buf += self._more(recv)
        head = bytes(buf[:end]).decode("latin-1").split("\r\n")
        del buf[: end + 4]
        status = int(head[0].split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:])}
        if "content-length" in fields:
            n = int(fields["content-length"])
            while len(buf) < n:
                buf += self._more(recv)
            seconds = time.perf_counter() - start
            raw, chunked = bytes(buf[:n]), False
        elif fields.get("transfer-encoding", "").lower() == "chunked":
            pos = 0  # the next chunk's size line; nothing is copied until the last chunk is in
            while True:
                while (eol := buf.find(b"\r\n", pos)) < 0:
                    buf += self._more(recv)
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
                nxt = eol + 2 + size + 2  # the chunk, its CRLF (the last chunk: the empty trailer's)
                while len(buf) < nxt:
                    buf += self._more(recv)
                pos = nxt
                if size == 0:
                    break
            seconds = time.perf_counter() - start
            raw, chunked, n = bytes(buf[:pos]), True, pos
        else:
            raise RuntimeError(f"an answer this client cannot delimit: {fields}")
        del buf[:n]
        return Answer(status, fields, raw, chunked, seconds)

    @staticmethod
    def _more(recv: Any) -> bytes:
        data: bytes = recv(RECV)
        if not data:
            raise ConnectionResetError("the server closed the connection")
        return data


def answer_of(answer: Answer) -> dict[str, Any]:
    """The JSON-RPC message an answer carries: the JSON body, or the last ``data:`` of an SSE
    stream (the response comes after the priming event and any notifications)."""
    body = answer.body()
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:] for line in body.splitlines() if line.startswith(b"data:") and line[5:].strip()]
        body = data[-1]
    message: dict[str, Any] = json.loads(body)
    return message
