"""Serve UnloadableModel (defined in its own module, as parallel workers import it by name)."""

from chariot_support.server.server import serve

from .model import UnloadableModel

if __name__ == "__main__":
    serve(UnloadableModel, default_model_id="unloadable")
