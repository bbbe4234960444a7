"""Serve FaultyModel (defined in its own module, as parallel workers import it by name)."""

from chariot_support.server.server import serve

from .model import FaultyModel

if __name__ == "__main__":
    serve(FaultyModel, default_model_id="faulty")
