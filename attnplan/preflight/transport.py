"""Reading a node's answer: bounded *after* decoding, and decoded off the event loop.

httpx decodes ``Content-Encoding`` inside ``aiter_bytes`` and one compressed chunk becomes
one decoded chunk, whatever its size: a byte cap counted on what ``aiter_bytes`` yields sees
the gigabyte only once it is in memory, and the decompression runs on the event loop that
every other node's request shares (issue 24 #11: 980 bytes of ``gzip, gzip`` decoded to
~1.1 GB in 14-34 s per node, and unrelated nodes timed out behind it). Here the raw bytes are
read (``aiter_raw``), at most one encoding is accepted (gzip or deflate: nothing we serve
compresses at all, and a stack of encodings has no honest use), and each chunk is inflated in
a worker thread with ``max_length`` so no more than the limit is ever produced.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any, MutableMapping, Optional

# What preflight asks for: the encodings it can decode under the limit, nothing else.
ACCEPT_ENCODING = "gzip, deflate"


class BodyError(Exception):
    """Why an answer's body was refused (the node's ``error`` row says it)."""


class BoundedInflater:
    """One gzip or deflate stream, inflated to at most ``limit`` bytes in all."""

    def __init__(self, encoding: str, limit: int):
        self.encoding = encoding
        self.limit = limit
        self.produced = 0
        # gzip: header auto-detected (zlib or gzip); deflate: zlib-wrapped as RFC 9110 says,
        # raw deflate when the first bytes show a server sent it bare (as httpx also accepts).
        self._d = zlib.decompressobj(zlib.MAX_WBITS | 32 if encoding == "gzip" else zlib.MAX_WBITS)
        self._started = False

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        try:
            if not self._started and self.encoding == "deflate":
                self._started = True
                try:
                    return self._inflate(data, out)
                except zlib.error:
                    self._d = zlib.decompressobj(-zlib.MAX_WBITS)
                    out.clear()
                    self.produced = 0
            return self._inflate(data, out)
        except zlib.error as exc:
            raise BodyError(f"malformed {self.encoding} body: {exc}") from None

    def _inflate(self, data: bytes, out: list[bytes]) -> bytes:
        while data:
            if self._d.eof:
                raise BodyError(f"data after the end of the {self.encoding} stream")
            chunk = self._d.decompress(data, self.limit - self.produced + 1)
            self.produced += len(chunk)
            if self.produced > self.limit:
                raise BodyError(f"answer larger than {self.limit} bytes once decoded ({self.encoding})")
            out.append(chunk)
            data = self._d.unconsumed_tail
        return b"".join(out)

    def finish(self) -> bytes:
        if not self._d.eof:
            try:
                tail = self._d.flush()
            except zlib.error as exc:
                raise BodyError(f"malformed {self.encoding} body: {exc}") from None
            if not self._d.eof:
                raise BodyError(f"truncated {self.encoding} body")
            self.produced += len(tail)
            if self.produced > self.limit:
                raise BodyError(f"answer larger than {self.limit} bytes once decoded ({self.encoding})")
            return tail
        return b""


def inflater_for(content_encoding: Optional[str], limit: int) -> Optional[BoundedInflater]:
    """None for an unencoded body; a ``BoundedInflater`` for one gzip or deflate; ``BodyError``
    for a stack of encodings or any other encoding."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise BodyError(f"stacked Content-Encoding {', '.join(codings)[:60]!r} refused (at most one of gzip, deflate)")
    coding = {"x-gzip": "gzip"}.get(codings[0], codings[0])
    if coding not in ("gzip", "deflate"):
        raise BodyError(f"Content-Encoding {coding[:30]!r} not accepted (gzip or deflate)")
    return BoundedInflater(coding, limit)


async def read_body(resp: Any, limit: int, state: Optional[MutableMapping[str, str]] = None) -> bytes:
    """The decoded body of an httpx streaming response, at most ``limit`` bytes before and after
    decoding; ``BodyError`` otherwise. Inflation runs in a worker thread."""
    inflater = inflater_for(resp.headers.get("content-encoding"), limit)
    raw = 0
    parts: list[bytes] = []
    async for chunk in resp.aiter_raw():
        raw += len(chunk)
        if raw > limit:
            raise BodyError(f"answer larger than {limit} bytes")
        if inflater is not None:
            chunk = await asyncio.to_thread(inflater.feed, chunk)
        parts.append(chunk)
        if state is not None:
            state["stage"] = f"HTTP {resp.status_code}, {raw} bytes received, body incomplete"
    if inflater is not None:
        parts.append(inflater.finish())
    return b"".join(parts)
