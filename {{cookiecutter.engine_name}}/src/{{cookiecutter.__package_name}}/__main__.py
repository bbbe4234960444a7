"""Start the engine: `python -m {{ cookiecutter.__package_name }}` (the Dockerfile runs the same)."""

from chariot_support.server.server import serve

from . import DEFAULT_MODEL_ID


def main() -> None:
    # The model is named, not imported here: the engine imports it once its log takes in what native code writes, so
    # that what the model's libraries write as they are imported comes out as JSON lines too.
    serve(f"{__package__}.model:Model", default_model_id=DEFAULT_MODEL_ID)


if __name__ == "__main__":
    main()
