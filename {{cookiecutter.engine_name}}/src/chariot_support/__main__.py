"""Serve the demo model of a task type without baking an engine: `python -m chariot_support "Object Detection"`.

The support package's own tests start engines this way, so they hold whatever model an engine's author wrote.
"""

import sys

from chariot_support.model.demo import DEMO_MODELS
from chariot_support.model.tasks import TaskType
from chariot_support.server.server import serve


def main(argv: list[str]) -> int:
    names = [t.value for t in TaskType]
    if len(argv) != 1 or argv[0] not in names:
        print(f"usage: python -m chariot_support TASK_TYPE, one of: {', '.join(map(repr, names))}", file=sys.stderr)
        return 2
    serve(DEMO_MODELS[TaskType(argv[0])], default_model_id="demo")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
