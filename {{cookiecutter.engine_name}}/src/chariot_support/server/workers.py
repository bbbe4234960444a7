"""The supervisor of parallel workers (MLSERVER_PARALLEL_WORKERS): a worker that dies or stops answering fails its
requests fast and is replaced."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable
from typing import Any

from chariot_support.errors import PredictTimeout, WorkersDown, signal_name
from chariot_support.seams.mlserver import (
    guard_dispatcher,
    handle_worker_exits,
    replace_worker,
    worker_pools,
    workers_of,
)

logger = logging.getLogger("chariot_support")

# How long past CHARIOT_PREDICT_TIMEOUT the main process waits for a parallel worker's answer. A worker answers a
# predict that overran with its own 504 at the timeout; one that has not answered this much later is not running
# its event loop (stopped, deadlocked, or a C call holding the GIL) and is replaced.
WORKER_GRACE = 5.0


class WorkerWatch:
    """Notices parallel workers that die or stop answering, fails their requests fast and replaces them.

    MLServer reaps one child per SIGCHLD with `waitpid(-1)`. Two workers that die together send one signal, so
    one of them was never replaced and the requests sent to it waited forever. The watch instead polls each
    worker it knows on every SIGCHLD (leaving other children, such as a model's own subprocesses, alone), and
    bounds the wait for any worker's answer by CHARIOT_PREDICT_TIMEOUT plus WORKER_GRACE. It is the policy
    `seams.mlserver.guard_dispatcher` applies to MLServer's dispatchers.
    """

    def __init__(self, registry, predict_timeout: float):
        self._registry = registry
        self._guard = predict_timeout + WORKER_GRACE
        self._noticed: set[int] = set()
        self._starting: set[int] = set()  # replacements that have not loaded the model yet
        self._replacing: set[asyncio.Task] = set()  # held until done: the loop keeps only weak references to tasks
        self.closing = False

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        # A signal can be missed while another is handled, so the workers are also looked at every second.
        handle_worker_exits(lambda: loop.call_soon_threadsafe(self._reap))
        self._poll = loop.create_task(self._poll_workers())
        for pool in worker_pools(self._registry):
            guard_dispatcher(pool, self)

    async def _poll_workers(self) -> None:
        while not self.closing:
            await asyncio.sleep(1)
            self._reap()

    # MLServer puts every worker back in the rotation when one replacement is ready, so a request could reach
    # another that had not loaded the model yet (a 404). The rotation holds only workers with the model.
    def in_rotation(self, pid: int) -> bool:
        return pid not in self._starting

    def starting(self, pid: int) -> None:
        self._starting.add(pid)

    def ready(self, pid: int) -> None:
        self._starting.discard(pid)

    def no_worker(self) -> Exception:
        return WorkersDown(
            "no parallel worker is running: the engine is replacing the ones that stopped; retry shortly"
        )

    async def predict(self, answer: Awaitable, pid: int) -> Any:
        try:
            return await asyncio.wait_for(answer, self._guard)
        except TimeoutError:
            logger.error(
                "parallel worker %s gave no answer within CHARIOT_PREDICT_TIMEOUT + %g s; it is replaced",
                pid,
                WORKER_GRACE,
            )
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise PredictTimeout(
                f"no answer within CHARIOT_PREDICT_TIMEOUT ({self._guard - WORKER_GRACE:g} s): the parallel worker"
                " serving this request stopped answering and is being replaced"
            ) from None

    def _reap(self) -> None:
        if self.closing:
            return
        for pool in worker_pools(self._registry):
            for pid, worker in list(workers_of(pool).items()):
                if pid in self._noticed or worker.exitcode is None:  # exitcode polls this one child, and reaps it
                    continue
                self._noticed.add(pid)
                task = asyncio.create_task(self._replace(pool, pid, worker.exitcode))
                self._replacing.add(task)
                task.add_done_callback(self._replacing.discard)

    async def _replace(self, pool, pid: int, exit_code: int) -> None:
        logger.error(
            "parallel worker %d stopped (%s): its requests get 503, and a new worker starts",
            pid,
            signal_name(exit_code),
        )
        try:
            await replace_worker(pool, pid, exit_code or 1)  # cancels its requests, starts a worker, loads the model
        except Exception:
            logger.exception("a parallel worker could not be replaced; the engine serves with the others")
        else:
            logger.info("the worker that replaced %d has the model loaded and takes requests", pid)

    def serving(self) -> bool:
        """Whether at least one worker is running with the model loaded."""
        pool = worker_pools(self._registry)[0]
        return any(pid not in self._starting and w.exitcode is None for pid, w in list(workers_of(pool).items()))
