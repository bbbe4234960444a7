"""The supervisor of parallel workers (MLSERVER_PARALLEL_WORKERS): a worker that dies or stops answering fails its
requests fast and is replaced."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from itertools import cycle

from .errors import PredictTimeout
from .internals import WORKER_GRACE, ModelRequestMessage, WorkersDown, signal_name

logger = logging.getLogger("chariot_support")


class WorkerWatch:
    """Notices parallel workers that die or stop answering, fails their requests fast and replaces them.

    MLServer reaps one child per SIGCHLD with `waitpid(-1)`. Two workers that die together send one signal, so
    one of them was never replaced and the requests sent to it waited forever. The watch instead polls each
    worker it knows on every SIGCHLD (leaving other children, such as a model's own subprocesses, alone), and
    bounds the wait for any worker's answer by CHARIOT_PREDICT_TIMEOUT plus WORKER_GRACE.
    """

    def __init__(self, registry, predict_timeout: float):
        self._registry = registry
        self._guard = predict_timeout + WORKER_GRACE
        self._noticed: set[int] = set()
        self._starting: set[int] = set()  # replacements that have not loaded the model yet
        self.closing = False

    def _pools(self) -> list:
        return [self._registry._default_pool, *self._registry._pools.values()]

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        # In place of MLServer's handler (uvloop keeps SIGCHLD from add_signal_handler). A signal can be missed
        # while another is handled, so the workers are also looked at every second.
        signal.signal(signal.SIGCHLD, lambda *_: loop.call_soon_threadsafe(self._reap))
        self._poll = loop.create_task(self._poll_workers())
        for pool in self._pools():
            self._guard_dispatcher(pool._dispatcher)

    async def _poll_workers(self) -> None:
        while not self.closing:
            await asyncio.sleep(1)
            self._reap()

    def _guard_dispatcher(self, dispatcher) -> None:
        # MLServer puts every worker back in the rotation when one replacement is ready, so a request could reach
        # another that had not loaded the model yet (a 404). The rotation holds only workers with the model.
        def rotation():
            dispatcher._workers_round_robin = cycle([pid for pid in dispatcher._workers if pid not in self._starting])
            return dispatcher._workers_round_robin

        started, ready = dispatcher.on_worker_start, dispatcher.on_worker_ready

        async def on_worker_start(worker):
            self._starting.add(worker.pid)
            await started(worker)

        def on_worker_ready(worker):
            self._starting.discard(worker.pid)
            ready(worker)

        dispatcher._reset_round_robin = rotation
        dispatcher.on_worker_start = on_worker_start
        dispatcher.on_worker_ready = on_worker_ready
        pick = dispatcher._get_worker

        def get_worker():
            try:
                return pick()
            except (StopIteration, KeyError):  # the rotation is empty, or names a worker that just went
                raise WorkersDown(
                    "no parallel worker is running: the engine is replacing the ones that stopped; retry shortly"
                ) from None

        dispatcher._get_worker = get_worker
        responses = dispatcher._async_responses
        wait = responses.schedule_and_wait

        async def bounded_wait(message, worker):
            if not isinstance(message, ModelRequestMessage):  # model loads may take as long as they take
                return await wait(message, worker)
            try:
                return await asyncio.wait_for(wait(message, worker), self._guard)
            except TimeoutError:
                logger.error(
                    "parallel worker %s gave no answer within CHARIOT_PREDICT_TIMEOUT + %g s; it is replaced",
                    worker.pid,
                    WORKER_GRACE,
                )
                try:
                    os.kill(worker.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                raise PredictTimeout(
                    f"no answer within CHARIOT_PREDICT_TIMEOUT ({self._guard - WORKER_GRACE:g} s): the parallel worker"
                    " serving this request stopped answering and is being replaced"
                ) from None

        responses.schedule_and_wait = bounded_wait

    def _reap(self) -> None:
        if self.closing:
            return
        for pool in self._pools():
            for pid, worker in list(pool._workers.items()):
                if pid in self._noticed or worker.exitcode is None:  # exitcode polls this one child, and reaps it
                    continue
                self._noticed.add(pid)
                asyncio.create_task(self._replace(pool, pid, worker.exitcode))

    async def _replace(self, pool, pid: int, exit_code: int) -> None:
        logger.error(
            "parallel worker %d stopped (%s): its requests get 503, and a new worker starts",
            pid,
            signal_name(exit_code),
        )
        try:
            await pool.on_worker_stop(pid, exit_code or 1)  # cancels its requests, starts a worker, loads the model
        except Exception:
            logger.exception("a parallel worker could not be replaced; the engine serves with the others")
        else:
            logger.info("the worker that replaced %d has the model loaded and takes requests", pid)

    def serving(self) -> bool:
        """Whether at least one worker is running with the model loaded."""
        pool = self._registry._default_pool
        return any(pid not in self._starting and w.exitcode is None for pid, w in list(pool._workers.items()))
