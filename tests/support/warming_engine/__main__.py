"""Serve FirstCallSlowModel (defined in its own module, as parallel workers import it by name)."""

from chariot_support.server.server import serve

if __name__ == "__main__":
    serve("warming_engine.model:FirstCallSlowModel", default_model_id="warming")  # as a baked engine's __main__
