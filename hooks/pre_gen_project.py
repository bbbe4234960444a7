"""Refuse answers that would bake a broken engine, with one plain sentence and a non-zero exit."""

import re
import sys

ANSWERS = {
    "engine_name": {{ cookiecutter.engine_name | tojson }},
    "model_id": {{ cookiecutter.model_id | tojson }},
    "description": {{ cookiecutter.description | tojson }},
    "author": {{ cookiecutter.author | tojson }},
    "author_email": {{ cookiecutter.author_email | tojson }},
}

RULES = [
    (
        "engine_name",
        re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*").fullmatch,
        "engine_name {value!r} must be a lowercase slug: letters, digits and single dashes, starting with a letter"
        " (for example 'chariot-engine').",
    ),
    (
        "engine_name",
        lambda v: len(v) <= 63,
        "engine_name {value!r} is longer than 63 characters, too long for an image or Kubernetes name.",
    ),
    (
        "engine_name",
        lambda v: v.replace("-", "_") != "chariot_support",
        "engine_name {value!r} would name the engine's package chariot_support, the support package every engine"
        " already has; choose another name.",
    ),
    (
        "model_id",
        re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?").fullmatch,
        "model_id {value!r} cannot stand in the URL path /v2/models/m-<id>: use lowercase letters, digits and"
        " dashes, not starting or ending with a dash.",
    ),
    ("description", lambda v: v.strip() and "\n" not in v, "description must be one non-empty line."),
    ("author", lambda v: v.strip() and "\n" not in v, "author must be one non-empty line."),
    (
        "author_email",
        re.compile(r"[^@\s\"]+@[^@\s\"]+").fullmatch,
        "author_email {value!r} is not an e-mail address.",
    ),
]


def main() -> int:
    for key, accept, message in RULES:
        value = ANSWERS[key]
        if not accept(value):
            print(message.format(value=value), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
