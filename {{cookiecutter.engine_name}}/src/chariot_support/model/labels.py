"""A model's class labels, from where Chariot puts them: `chariot_model_config.json` (its `class_labels`, as
Chariot's training blueprints write it beside the weights) or a `labels.txt` with one label per line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG = "chariot_model_config.json"
LABELS_TXT = "labels.txt"


def read_labels(model_dir: Path) -> list[str]:
    """The labels in class-index order: `class_labels` of chariot_model_config.json (a list, or an object mapping
    indices to labels or labels to indices), else labels.txt. ValueError names the file and what is wrong in it;
    FileNotFoundError names both files when neither is in `model_dir`."""
    model_dir = Path(model_dir)
    config = model_dir / CONFIG
    if config.is_file():
        try:
            found = json.loads(config.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{config} is not JSON: {exc}") from None
        if isinstance(found, dict) and "class_labels" in found:
            return _ordered(found["class_labels"], config)
    text = model_dir / LABELS_TXT
    if text.is_file():
        labels = [line.strip() for line in text.read_text().splitlines() if line.strip()]
        if not labels:
            raise ValueError(f"{text} holds no labels: write one per line, in class-index order")
        return labels
    where = f"{config} has no class_labels, and" if config.is_file() else f"neither {config} nor"
    raise FileNotFoundError(
        f"{where} {text} exists: put the labels in one of them, or set MODEL_DIR to the folder that holds them"
    )


def _ordered(labels: Any, source: Path) -> list[str]:
    if isinstance(labels, list) and labels and all(isinstance(label, str) and label for label in labels):
        return labels
    if isinstance(labels, dict) and labels:
        pairs = list(labels.items())
        if all(isinstance(v, int) and not isinstance(v, bool) for _, v in pairs):  # {"cat": 0, "dog": 1}
            pairs = [(str(v), k) for k, v in pairs]
        try:
            indexed = sorted((int(k), v) for k, v in pairs)
        except (TypeError, ValueError):
            indexed = []
        if (
            indexed
            and [i for i, _ in indexed] == list(range(len(indexed)))
            and all(isinstance(v, str) and v for _, v in indexed)
        ):
            return [v for _, v in indexed]
    raise ValueError(
        f"class_labels in {source} must be a list of labels, or an object mapping each class index from 0 up to its"
        f" label (or each label to its index); got {json.dumps(labels)[:200]}"
    )
