"""Refuse answers that would bake a broken engine, with one plain sentence and a non-zero exit. The model id is
checked after the files are written (post_gen_project.py), by the rule in the engine's own support package."""

import json
import re
import sys

# Each answer arrives as a JSON string literal (cookiecutter renders this file), so quotes and backslashes are safe;
# single quotes around it because JSON's own are double (the formatter would swap them).
# fmt: off
ANSWERS = {
    "engine_name": json.loads(r'''{{ cookiecutter.engine_name | tojson }}'''),
    "model_id": json.loads(r'''{{ cookiecutter.model_id | tojson }}'''),
    "description": json.loads(r'''{{ cookiecutter.description | tojson }}'''),
    "author": json.loads(r'''{{ cookiecutter.author | tojson }}'''),
    "author_email": json.loads(r'''{{ cookiecutter.author_email | tojson }}'''),
}
# fmt: on

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
