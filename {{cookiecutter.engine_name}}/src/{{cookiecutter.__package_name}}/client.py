"""Send images to this engine and see what it found: `python -m {{ cookiecutter.__package_name }}.client IMAGE...`
(`--help` lists the options; `--draw out.png` draws the results on the image)."""

import sys
from collections.abc import Sequence

from chariot_support.client import cli as client

from . import DEFAULT_MODEL_ID  # --model-id picks another


def main(argv: Sequence[str] | None = None) -> int:
    return client.main(argv, default_model_id=DEFAULT_MODEL_ID)


if __name__ == "__main__":
    sys.exit(main())
