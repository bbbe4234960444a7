"""Serve FirstCallSlowModel (defined in its own module, as parallel workers import it by name)."""

from chariot_support.server.server import serve

from .model import FirstCallSlowModel

if __name__ == "__main__":
    serve(FirstCallSlowModel, default_model_id="warming")
