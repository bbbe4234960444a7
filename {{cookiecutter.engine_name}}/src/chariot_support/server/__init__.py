"""The engine as one server: MLServer set up with the engine's settings, the transports and the pipeline assembled,
start-up and shutdown, and the supervisor of parallel workers."""
