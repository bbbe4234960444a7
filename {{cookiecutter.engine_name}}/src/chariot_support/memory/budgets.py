"""What a request may hold in memory while it is served: its body (REST or gRPC) and the decoded pixels of its images,
each against one of the engine's memory budgets."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from chariot_support.errors import Overloaded
from chariot_support.memory.reclaim import RECLAIM_AFTER_BYTES, reclaim_soon
from chariot_support.settings import EngineSettings

logger = logging.getLogger("chariot_support")

# A body (or gRPC message) this large is parsed off the event loop: copying 60 MiB of protobuf held the loop, and
# every health check waiting on it, for about 40 ms a copy.
LARGE_BODY = 1 << 20


class MemoryBudget:
    """Admits requests while the decoded pixels of those in flight fit the budget; the rest wait briefly, then get
    a 503. What each holds is known from its images' headers (`ParsedRequest.decoded_bytes`), and one that could
    never fit was refused with a 413 when it was read."""

    def __init__(self, settings: EngineSettings):
        self._settings = settings
        self._capacity = settings.decode_budget_mb << 20
        self._used = 0
        self._room = threading.Condition()
        self._waiting = 0  # threads waiting for room

    def admit(self, cost: int, deadline: float) -> _Admission:
        """Hold `cost` bytes of decoded pixels while the block (`with budget.admit(...)`) runs; wait at most
        CHARIOT_ADMISSION_WAIT for room."""
        return _Admission(self, cost, deadline)

    def hold(self, cost: int, deadline: float) -> None:
        """Take `cost` bytes, waiting for room (admit's block does, and gives them back with release)."""
        with self._room:
            if self._used + cost > self._capacity:
                self._waiting += 1
                try:
                    self._wait_for_room(cost, min(time.monotonic() + self._settings.admission_wait, deadline))
                finally:
                    self._waiting -= 1
            self._used += cost

    def _wait_for_room(self, cost: int, until: float) -> None:
        while self._used + cost > self._capacity:
            left = until - time.monotonic()
            if left <= 0:
                logger.warning("refused a request of %d MiB decoded: the decode budget is full", cost >> 20)
                raise Overloaded(
                    f"the engine is decoding as many images as its memory budget allows"
                    f" ({self._settings.decode_budget_mb:,} MiB, CHARIOT_DECODE_BUDGET_MB); retry shortly"
                )
            self._room.wait(left)

    def release(self, cost: int) -> None:
        with self._room:
            self._used -= cost
            if self._waiting:  # notify_all is a Python call over the waiters: only when there are some
                self._room.notify_all()


class _Admission:
    """A request's room in the decode budget, held while its `with` block runs. A class, not a generator's context
    manager, which cost each request 1.5 us more here."""

    __slots__ = ("_budget", "_cost", "_deadline")

    def __init__(self, budget: MemoryBudget, cost: int, deadline: float):
        self._budget, self._cost, self._deadline = budget, cost, deadline

    def __enter__(self) -> None:
        self._budget.hold(self._cost, self._deadline)

    def __exit__(self, *exc_info) -> None:
        self._budget.release(self._cost)


class BodyBudget:
    """Request bodies in flight, REST and gRPC together, against one process-wide budget (CHARIOT_BODY_BUDGET_MB).

    A body is counted before its bytes are buffered: by its declared length when it has one, else chunk by chunk as
    it arrives. A request that does not fit waits up to CHARIOT_ADMISSION_WAIT for room, then gets a 503, so a few
    clients holding large bodies open cannot make the process hold more than the budget. Event-loop only."""

    def __init__(self, capacity_bytes: int, wait_seconds: float):
        self.capacity = capacity_bytes
        self.used = 0
        self._released = 0  # bytes of bodies let go since memory was last reclaimed
        self._wait = wait_seconds
        self._room: asyncio.Condition | None = None

    def _full(self, size: int) -> Overloaded:
        logger.warning("refused a request body of %d KiB: the body budget is full", size >> 10)
        return Overloaded(self.full_message())

    def full_message(self) -> str:
        return (
            f"the engine holds as many request bodies as its memory budget allows ({self.capacity >> 20:,} MiB,"
            " CHARIOT_BODY_BUDGET_MB); retry shortly"
        )

    async def reserve(self, size: int) -> None:
        """Count `size` more bytes, waiting briefly for room; Overloaded (503) when there is none."""
        if self.used + size <= self.capacity:
            self.used += size
            return
        if self._room is None:
            self._room = asyncio.Condition()
        try:
            async with self._room:
                await asyncio.wait_for(
                    self._room.wait_for(lambda: self.used + size <= self.capacity), self._wait or 1e-9
                )
                self.used += size
        except TimeoutError:
            raise self._full(size) from None

    def let_go(self, size: int) -> None:
        """`size` bytes of a body or message have been dropped (counted in the budget or not): once enough have,
        memory is reclaimed."""
        self._released += size
        if self._released >= RECLAIM_AFTER_BYTES:
            self._released = 0
            reclaim_soon()

    def grow(self, size: int) -> None:
        """Count `size` more bytes of a body already admitted, without waiting: Overloaded when there is no room."""
        if self.used + size > self.capacity:
            raise self._full(size)
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        self.let_go(size)
        if self._room is not None:
            room = self._room

            async def wake() -> None:
                async with room:
                    room.notify_all()

            asyncio.get_running_loop().create_task(wake())
