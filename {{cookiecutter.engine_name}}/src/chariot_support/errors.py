"""Errors an engine answers with: each carries its HTTP status and a message for the person who caused it.

They are the engine's own: the transports turn them into `{"error": ...}` bodies (error_bodies.py) and gRPC status
codes (grpc/service.py), and `seams.mlserver.unwrap_worker_error` brings them back whole from a parallel worker."""

import signal


class ChariotError(Exception):
    """Base of the engine's own errors; the message is the whole `{"error": ...}` body."""

    status_code_default = 400

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code or self.status_code_default


class BadRequest(ChariotError):
    """The client sent something the engine cannot use (400)."""


class PredictFailed(ChariotError):
    """The engine author's predict raised (500)."""

    status_code_default = 500


class InvalidResult(ChariotError):
    """The engine author's predict returned something that is not a valid Chariot result (500)."""

    status_code_default = 500


class NotFound(ChariotError):
    """No such model or version here (404)."""

    status_code_default = 404


class PredictTimeout(ChariotError):
    """Predict did not return within CHARIOT_PREDICT_TIMEOUT (504)."""

    status_code_default = 504


class ModelBusy(ChariotError):
    """A model that is not thread-safe is still inside a predict that overran its timeout (503)."""

    status_code_default = 503


class ModelLoadFailed(ChariotError):
    """The engine author's load raised: the engine cannot serve, and stops (503 to anything that asks meanwhile)."""

    status_code_default = 503


class ModelLoading(ChariotError):
    """The model is not loaded yet (503)."""

    status_code_default = 503


class WorkersDown(ChariotError):
    """No parallel worker can take a request right now (503)."""

    status_code_default = 503


def signal_name(exit_code: int) -> str:
    """How a parallel worker's process ended, as its exit code says: "killed by SIGKILL", "exit code 1"."""
    if exit_code < 0:
        try:
            return f"killed by {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"killed by signal {-exit_code}"
    return f"exit code {exit_code}"


class NotImplementedByModel(ChariotError):
    """The route exists but the engine's model does not provide it (501)."""

    status_code_default = 501


class TooLarge(ChariotError):
    """The request can never be served under this engine's settings (413)."""

    status_code_default = 413


class Overloaded(ChariotError):
    """The engine has no room for the request now; it may have later (503, with Retry-After)."""

    status_code_default = 503


class DoesNotStream(ChariotError):
    """Streaming inference is not served (501)."""

    status_code_default = 501

    def __init__(self):
        super().__init__(
            "this engine does not stream: send each request to /v2/models/<name>/infer (or gRPC ModelInfer)"
        )


class BadSettings(Exception):
    """The engine's environment asks for something it cannot do: it does not start (the message says what to set)."""


def internal_error(error: BaseException) -> str:
    """The message of a 500 for an error nobody expected: its kind and words, for the engine's author to look up
    in the log, where its traceback is."""
    return f"internal error: {type(error).__name__}: {error}"
