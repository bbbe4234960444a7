"""What an engine author's `model.py` sees: the `ChariotModel` base class, the `Image` handed to predict, the
result types of each Chariot task type, and helpers most models need (detectors, labels, ONNX Runtime, the demo)."""
