"""Serve SlowNative."""

from chariot_support.server.server import serve

from .model import SlowNative

if __name__ == "__main__":
    serve(SlowNative, default_model_id="slow")
