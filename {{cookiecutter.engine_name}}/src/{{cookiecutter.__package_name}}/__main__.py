"""Start the engine: `python -m {{ cookiecutter.__package_name }}` (the Dockerfile runs the same)."""

from chariot_support.serving.server import serve

from .model import Model

# The id the engine answers to when run locally; Chariot's own id reaches it at deploy time (see README).
DEFAULT_MODEL_ID = "{{ cookiecutter.model_id }}"


def main() -> None:
    serve(Model, default_model_id=DEFAULT_MODEL_ID)


if __name__ == "__main__":
    main()
