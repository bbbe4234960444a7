"""Serve FixedCostModel (defined in its own module, as parallel workers import it by name)."""

from chariot_support.server.server import serve

from .model import FixedCostModel

if __name__ == "__main__":
    serve(FixedCostModel, default_model_id="fixed-cost")
