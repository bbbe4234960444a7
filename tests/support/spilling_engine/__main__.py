"""Serve the spilling model of the task type named on the command line."""

import sys

from chariot_support.server.server import serve

from .model import MODELS

if __name__ == "__main__":
    serve(MODELS[sys.argv[1]], default_model_id="spilling")
