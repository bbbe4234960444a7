"""Triton's extensions the engine serves beside the Open Inference Protocol, so that Triton's own tools (tritonclient's
get_model_config and get_inference_statistics, perf_analyzer) read the engine: statistics (each request's stages,
counted per model, statistics.py) and model configuration (what is true of this engine, config.py), as Triton's JSON
over REST and Triton's messages over gRPC (messages.py)."""
