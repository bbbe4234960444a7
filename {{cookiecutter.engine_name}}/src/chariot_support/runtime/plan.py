"""How the engine's settings have a model class served (threads, copies, inline, batching), worked out in one
place: the runtime loads and runs the model so, and the engine states it in its start-up log line."""

from __future__ import annotations

from dataclasses import dataclass

from chariot_support.model.base import ChariotModel
from chariot_support.runtime.batching import BatchSettings, batch_settings
from chariot_support.runtime.copies import copies_wanted
from chariot_support.settings import EngineSettings


@dataclass(frozen=True)
class ServingPlan:
    """How the engine's settings have a model class served, worked out in one place: the runtime loads and runs the
    model so, and the engine states it in its start-up log line."""

    threads: int  # CHARIOT_THREADS: the threads that decode images and run predict
    copies: int
    thread_safe: bool
    inline: bool  # CHARIOT_PREDICT_INLINE
    batching: BatchSettings | None

    @classmethod
    def of(cls, model_class: type[ChariotModel], settings: EngineSettings) -> ServingPlan:
        return cls(
            threads=settings.threads,
            copies=copies_wanted(model_class, settings.threads, settings.model_copies),
            thread_safe=model_class.thread_safe,
            inline=settings.predict_inline,
            batching=batch_settings(settings),
        )

    @property
    def calls_at_once(self) -> int:
        """Predicts that may run at once: one per thread for a thread-safe model, one per copy otherwise."""
        return 1 if self.inline else self.threads if self.thread_safe else self.copies

    @property
    def pool_threads(self) -> int:
        # Decoding and most predict work release the GIL, so threads keep both cores busy. Requests waiting for
        # their batch hold a thread each, doing nothing: room for one batch in predict and the next gathering.
        waiting = 2 * self.batching.max_size if self.batching is not None else 0
        return 0 if self.inline else self.threads + waiting
