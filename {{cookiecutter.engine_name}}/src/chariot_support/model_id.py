"""The one rule for a Chariot model id: the engine checks CHARIOT_MODEL_ID with it, and the template's bake hook
loads this file by path to check the model_id answer. Standard library only, so the hook can load it anywhere."""

import re

# Chariot addresses a model as /v2/models/m-<id>; the id is also a Kubernetes name, of at most 63 characters.
PATTERN = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def problem(model_id: str) -> str | None:
    """Why `model_id` cannot be a model id, or None when it can."""
    if PATTERN.fullmatch(model_id):
        return None
    if len(model_id) > 63:
        return f"model id {model_id[:80]!r} is {len(model_id)} characters long; Chariot's ids are at most 63"
    return (
        f"model id {model_id!r} cannot stand in the URL path /v2/models/m-<id>: use lowercase letters, digits and"
        " dashes, not starting or ending with a dash"
    )
