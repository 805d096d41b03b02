# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading one HTTP/1.1 answer from the bytes of a connection as they arrive.

The probe drives hundreds of connections from one thread (:mod:`probe`), so it
cannot block in a reader the way ``http.client`` does: it hands each
:class:`Answer` whatever bytes arrived and asks whether the answer is whole.
The answer comes from a rented box, so every part is bounded: a line, the number
of headers, the body (a length announced over the cap is refused before a byte
of the body is read). Whatever is not HTTP raises :class:`BadAnswer`, whose
message names the fault without quoting the box.
"""

from __future__ import annotations

import re

# A status or header line longer than this is not an answer of vLLM (nor of any sane server).
MAX_LINE_BYTES = 8192
MAX_HEADERS = 100
_STATUS = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: .*)?")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class BadAnswer(ValueError):
    """The bytes are not an HTTP/1.1 answer this reader takes."""


class BadStatusLine(BadAnswer):
    """The first line is not an HTTP/1.x status line (the name http.client gives it)."""


class RemoteDisconnected(BadAnswer):
    """The box closed the connection before its answer ended."""


class TooLarge(BadAnswer):
    """The body is (or is announced) over the cap."""


class Answer:
    """One answer, fed its connection's bytes by :meth:`feed` until :attr:`done`.

    ``limit`` caps the body. After it is done, :attr:`status` and :attr:`body` are
    set, and :attr:`reusable` says whether the connection may carry another answer
    (HTTP/1.1, not ``Connection: close``, a framed body).
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.status = 0
        self.body = bytearray()
        self.done = False
        self.reusable = False
        self._buffer = bytearray()
        self._step = self._status_line
        self._headers = 0
        self._length: int | None = None
        self._chunked = False
        self._close = False
        self._keep_alive = False

    def feed(self, data: bytes) -> bytes:
        """Take ``data``; what follows this answer's end (a pipelined next one) is returned."""
        self._buffer += data
        while not self.done and self._step():
            pass
        if not self.done:
            return b""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest

    def feed_eof(self) -> None:
        """The box closed the connection: the end of a body read to the close, else a fault."""
        if self._step == self._body_to_close:
            self._finish()
            return
        raise RemoteDisconnected("the box closed the connection before its answer ended")

    def _line(self, fault: type[BadAnswer] = BadAnswer) -> bytes | None:
        end = self._buffer.find(b"\n", 0, MAX_LINE_BYTES + 1)
        if end < 0:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise fault(f"not HTTP: a line over {MAX_LINE_BYTES} bytes")
            return None
        line = bytes(self._buffer[:end]).rstrip(b"\r")
        del self._buffer[:end + 1]
        return line

    def _status_line(self) -> bool:
        line = self._line(BadStatusLine)
        if line is None:
            return False
        matched = _STATUS.fullmatch(line)
        if matched is None:
            raise BadStatusLine("not HTTP: no status line")
        self.status = int(matched.group(1))
        self._keep_alive = line.startswith(b"HTTP/1.1")
        self._step = self._header_line
        return True

    def _header_line(self) -> bool:
        line = self._field()
        if line is None:
            return False
        if line:
            self._header(line)
            return True
        if 100 <= self.status < 200:
            # An interim answer (100 Continue): the real one follows.
            self.status, self._length, self._chunked, self._close = 0, None, False, False
            self._step = self._status_line
            return True
        if self.status in (204, 304):
            self._finish()
        elif self._chunked:
            self._step = self._chunk_size
        elif self._length is not None:
            if self._length > self.limit:
                raise TooLarge(f"over {self.limit} bytes")
            self._step = self._body_of_length
        else:
            self._keep_alive = False
            self._step = self._body_to_close
        return True

    def _header(self, line: bytes) -> None:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise BadAnswer("not HTTP: a malformed header")
        name, value = name.lower(), value.strip().lower()
        if name == b"content-length":
            if not value.isdigit() or len(value) > 19 or (
                    self._length is not None and self._length != int(value)):
                raise BadAnswer("not HTTP: a malformed Content-Length")
            self._length = int(value)
        elif name == b"transfer-encoding":
            self._chunked = value.rsplit(b",", 1)[-1].strip() == b"chunked"
            if not self._chunked:
                raise BadAnswer("not HTTP: a transfer coding other than chunked")
        elif name == b"connection":
            self._close = b"close" in (token.strip() for token in value.split(b","))

    def _take(self, count: int) -> None:
        if len(self.body) + count > self.limit:
            raise TooLarge(f"over {self.limit} bytes")
        self.body += self._buffer[:count]
        del self._buffer[:count]

    def _body_of_length(self) -> bool:
        self._take(min(len(self._buffer), self._length - len(self.body)))
        if len(self.body) == self._length:
            self._finish()
        return False

    def _body_to_close(self) -> bool:
        self._take(len(self._buffer))
        return False

    def _chunk_size(self) -> bool:
        line = self._line()
        if line is None:
            return False
        size = _HEX.fullmatch(line.split(b";", 1)[0].strip())
        if size is None:
            raise BadAnswer("not HTTP: a malformed chunk size")
        self._length = int(size.group(0), 16)
        if len(self.body) + self._length > self.limit:
            raise TooLarge(f"over {self.limit} bytes")
        self._step = self._chunk_data if self._length else self._trailer
        return True

    def _chunk_data(self) -> bool:
        if len(self._buffer) < self._length + 2:
            return False
        if self._buffer[self._length:self._length + 2] != b"\r\n":
            raise BadAnswer("not HTTP: a chunk without its end")
        self._take(self._length)
        del self._buffer[:2]
        self._step = self._chunk_size
        return True

    def _trailer(self) -> bool:
        line = self._field()
        if line == b"":
            self._finish()
        return bool(line)

    def _field(self) -> bytes | None:
        """The next header or trailer line, counted (an answer may carry at most
        ``MAX_HEADERS``); b"" for the blank line that ends them, None until a line is whole."""
        line = self._line()
        if line:
            self._headers += 1
            if self._headers > MAX_HEADERS:
                raise BadAnswer(f"not HTTP: over {MAX_HEADERS} headers")
        return line

    def _finish(self) -> None:
        self.done = True
        self.reusable = self._keep_alive and not self._close
