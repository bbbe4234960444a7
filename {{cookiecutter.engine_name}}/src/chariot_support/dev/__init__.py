"""For an engine's developer, not its server: test helpers, the checks every model is held to and the environment's
OpenCV check (its tests run them), the update check, the tuning tool, and the reference tables docs/ carries, written
from the code (`python -m chariot_support.dev.reference`)."""
