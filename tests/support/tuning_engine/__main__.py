"""Serve the model named by the first argument (the classes live in their own module: parallel workers import them
by name)."""

import sys

from chariot_support.server.server import serve

from .model import MODELS

if __name__ == "__main__":
    serve(MODELS[sys.argv[1]], default_model_id="tuning")
