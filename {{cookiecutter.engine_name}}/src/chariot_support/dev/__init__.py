"""For an engine's developer, not its server: test helpers, the checks every model is held to, the dependency
commands (`python -m chariot_support.dev.deps`), and the reference tables docs/ carries, written from the code
(`python -m chariot_support.dev.reference`)."""
