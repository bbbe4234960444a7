"""Serve RecordingModel (defined in its own module, as parallel workers import it by name)."""

from chariot_support.server.server import serve

from .model import RecordingModel

if __name__ == "__main__":
    serve(RecordingModel, default_model_id="batching")
