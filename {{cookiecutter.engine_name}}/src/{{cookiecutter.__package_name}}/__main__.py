"""Start the engine: `python -m {{ cookiecutter.__package_name }}` (the Dockerfile runs the same)."""

from chariot_support.server.server import serve

from . import DEFAULT_MODEL_ID
from .model import Model


def main() -> None:
    serve(Model, default_model_id=DEFAULT_MODEL_ID)


if __name__ == "__main__":
    main()
