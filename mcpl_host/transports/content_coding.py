"""Decoding an HTTP body's ``Content-Encoding``, every layer bounded as it decodes (RFC 9110
§8.4 Content-Encoding; RFC 9112 §7.2 the codings: gzip is RFC 1952, deflate the zlib format
of RFC 1950). Pure: bytes in, bytes out; the HTTP transports read the raw body and feed it.

Rules of this module:

- The host asks only for what it decodes here: ``Accept-Encoding: gzip, deflate``
  (``ACCEPT_ENCODING``), whatever optional decoders httpx could load (its own decoders
  inflate one network chunk in one call, with no bound on what it becomes).
- ``Content-Encoding`` lists the codings in the order they were applied (from every header
  of that name; more than ``max_codings``, ``Limits.max_content_codings``, are refused
  before any layer is made); they are undone in reverse. ``identity`` is no coding;
  ``x-gzip`` is gzip (RFC 9110 §8.4.1.3). Any other coding is refused (``BadCoding``): the
  host never passes on bytes it cannot read as if they were the body.
- Each layer inflates at most ``step_bytes`` at a time (``Limits.read_chunk_bytes``, 64 KiB
  by default), and the next layer takes each piece
  before the first goes on, so memory stays a few steps per layer whatever the ratio and
  the number of layers. Every layer's output is counted: past ``max_layer_bytes`` since the
  last ``restart_count()`` (a JSON body: never; an event stream: at each message, never at
  an event without data)
  the body is refused (``LayerTooLarge``). The final output is bounded by the caller too.
- gzip: members one after another are one body (RFC 1952 §2.2); bytes after the last
  member that do not start another are ignored. deflate: the zlib format, or raw deflate
  (sent by some servers) when the first bytes are not zlib; bytes after its end are ignored.
  A coding whose data is corrupt is refused (``BadCoding``).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Sequence
from typing import Protocol

from mcpl_host.limits import DEFAULT_MAX_CONTENT_CODINGS, DEFAULT_READ_CHUNK_BYTES

__all__ = [
    "ACCEPT_ENCODING",
    "BadCoding",
    "BodyDecoder",
    "LayerTooLarge",
    "codings_of",
]

#: The ``Accept-Encoding`` of every request: the codings ``BodyDecoder`` undoes.
ACCEPT_ENCODING = "gzip, deflate"
_GZIP_MAGIC = b"\x1f\x8b"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,40}")


class BadCoding(ValueError):
    """A coding the host does not decode, or data that is not valid in its coding;
    ``str()`` says which (the coding is named only when it is a token of at most 40
    characters)."""


class LayerTooLarge(ValueError):
    """One decoding layer produced more than its bound; ``str()`` names the layer and the
    bound in bytes."""

    def __init__(self, coding: str, layer: int, layers: int, max_bytes: int) -> None:
        super().__init__(
            f"a body whose decoding layer {layer} of {layers} ({coding}) gives over {max_bytes} bytes"
        )
        self.max_bytes = max_bytes


def codings_of(values: Sequence[str]) -> list[str]:
    """The codings named by ``Content-Encoding`` header values, in the order applied,
    lower-cased, without ``identity``; ``x-gzip`` as ``gzip``."""
    codings: list[str] = []
    for value in values:
        for part in value.split(","):
            name = part.strip().lower()
            if name and name != "identity":
                codings.append("gzip" if name == "x-gzip" else name)
    return codings


class _Inflater(Protocol):
    """What the layers use of a ``zlib`` decompression object."""

    @property
    def eof(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...
    @property
    def unconsumed_tail(self) -> bytes: ...
    def decompress(self, data: bytes, max_length: int = 0, /) -> bytes: ...


class _Layer:
    """Undoes one coding, ``step`` bytes of output at a time."""

    __slots__ = ("_between", "_coding", "_done", "_first", "_held", "_inflater", "_step")

    def __init__(self, coding: str, step: int) -> None:
        if coding not in ("gzip", "deflate"):
            # Named only when it is a short token (RFC 9110 §5.6.2): nothing to escape.
            shown = repr(coding) if _TOKEN.fullmatch(coding) else "that is no short token"
            raise BadCoding(f"a body in Content-Encoding {shown}, which the host does not decode")
        self._coding = coding
        self._step = step
        self._inflater: _Inflater = self._new()
        self._first = True  # nothing inflated yet (deflate: zlib or raw is still open)
        self._between = False  # gzip: a member ended; another may start
        self._held = b""  # gzip, between members: the first byte of what follows (deflate:
        # the first byte of the body, until the second tells zlib from raw deflate)
        self._done = False  # the coding ended: the rest is ignored

    def _new(self) -> _Inflater:
        return zlib.decompressobj(zlib.MAX_WBITS | 16 if self._coding == "gzip" else zlib.MAX_WBITS)

    def _next_member(self, data: bytes) -> bytes | None:
        """Between gzip members: the data of the next member (its inflater made), or None
        when there is none yet (or ever: then the rest is ignored)."""
        head = self._held + data
        if len(head) < len(_GZIP_MAGIC) and _GZIP_MAGIC.startswith(head):
            self._held = head
            return None
        self._held = b""
        if not head.startswith(_GZIP_MAGIC):
            self._done = True
            return None
        self._between = False
        self._inflater = self._new()
        return head

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The output of ``data``, in pieces of at most ``step`` bytes.

        Raises:
            BadCoding: the data is not valid in this coding.
        """
        pending = data
        if self._first and self._coding == "deflate":
            # zlib or raw deflate is told by the first two bytes (RFC 1950 §2.2): wait for them.
            pending = self._held + pending
            if len(pending) < 2:
                self._held = pending
                return
            self._held = b""
        while not self._done:
            if self._between:
                if not pending:
                    return
                found = self._next_member(pending)
                if found is None:
                    return
                pending = found
            try:
                out = self._inflater.decompress(pending, self._step)
            except zlib.error as exc:
                if self._first and self._coding == "deflate":
                    self._first = False
                    self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise BadCoding(f"a body that is not valid {self._coding} ({exc})") from None
            self._first = False
            if out:
                yield out
            if self._inflater.eof:
                if self._coding == "deflate":
                    self._done = True
                    return
                self._between = True
                pending = self._inflater.unused_data
                continue
            pending = self._inflater.unconsumed_tail
            if not pending and len(out) < self._step:
                return  # everything given is inflated (a full step may leave output inside)

    def finish(self) -> Iterator[bytes]:
        """What is left at the end of the body (a stream cut short gives what it has)."""
        if self._done or self._between or (self._first and self._held):
            return
        while True:
            out = self._inflater.decompress(b"", self._step)
            if not out:
                return
            yield out


class BodyDecoder:
    """Undoes the codings of one body (see the module rules).

    ``codings``: in the order applied (``codings_of``); ``max_layer_bytes``: the bound of
    each layer's output; ``step_bytes``: the most one layer inflates at a time;
    ``max_codings``: the most codings undone (``Limits.max_content_codings``).

    ``feed(raw)`` and ``finish()`` return iterators of decoded pieces, lazily: a layer goes
    on only when the consumer takes the next piece, so a consumer that stops at its own
    bound stops the decoding there.

    Raises (when built):
        BadCoding: a coding the host does not decode, or more than ``max_codings``.
    """

    __slots__ = ("_codings", "_counts", "_layers", "_max")

    def __init__(
        self,
        codings: Sequence[str],
        max_layer_bytes: int,
        step_bytes: int = DEFAULT_READ_CHUNK_BYTES,
        max_codings: int = DEFAULT_MAX_CONTENT_CODINGS,
    ) -> None:
        if len(codings) > max_codings:
            raise BadCoding(
                f"a body in {len(codings)} content codings, over limits.max_content_codings = {max_codings}"
            )
        self._codings = list(reversed(codings))  # the order they are undone
        self._layers = [_Layer(coding, step_bytes) for coding in self._codings]
        self._counts = [0] * len(self._layers)
        self._max = max_layer_bytes

    @property
    def identity(self) -> bool:
        """No coding: the raw bytes are the body."""
        return not self._layers

    def restart_count(self) -> None:
        """Start counting every layer's output from 0 (an event stream, at each message)."""
        for index in range(len(self._counts)):
            self._counts[index] = 0

    def _counted(self, index: int, pieces: Iterator[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            self._counts[index] += len(piece)
            if self._counts[index] > self._max:
                raise LayerTooLarge(self._codings[index], index + 1, len(self._layers), self._max)
            yield piece

    def _through(self, index: int, data: bytes, *, last: bool) -> Iterator[bytes]:
        """``data`` through layer ``index`` and every later one; with ``last``, each of
        them is finished after it."""
        if index == len(self._layers):
            if data:
                yield data
            return
        layer = self._layers[index]
        for piece in self._counted(index, layer.decode(data)):
            yield from self._through(index + 1, piece, last=False)
        if last:
            for piece in self._counted(index, layer.finish()):
                yield from self._through(index + 1, piece, last=False)
            yield from self._through(index + 1, b"", last=True)

    def feed(self, raw: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``raw``, the next bytes of the body as received.

        Raises (while iterated):
            BadCoding: data not valid in its coding.
            LayerTooLarge: a layer past ``max_layer_bytes``.
        """
        return self._through(0, raw, last=False)

    def finish(self) -> Iterator[bytes]:
        """The decoded pieces left at the end of the body. Raises as ``feed``."""
        return self._through(0, b"", last=True)
