"""Output capture with a fixed memory bound, however much a student process prints."""

from __future__ import annotations


class HeadTail:
    """Keeps the first `head` and the last `tail` bytes written, and counts the rest."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_cap, self.tail_cap = head, tail
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or not self.tail_cap:
            return
        if len(data) >= self.tail_cap:
            self._tail = bytearray(data[-self.tail_cap :])
        else:
            self._tail += data
            if len(self._tail) > self.tail_cap:
                del self._tail[: len(self._tail) - self.tail_cap]

    @property
    def dropped(self) -> int:
        return self.total - len(self._head) - len(self._tail)

    def getvalue(self) -> bytes:
        return bytes(self._head + self._tail)

    def parts(self) -> tuple[bytes, bytes]:
        return bytes(self._head), bytes(self._tail)
