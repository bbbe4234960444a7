"""For an engine's developer, not its server: test helpers, the checks every model is held to, and the dependency
commands (`python -m chariot_support.dev.deps`)."""
