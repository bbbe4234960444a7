"""Native code writing to the process's file descriptors, for the fixture models: a real LiteRT (TFLite) interpreter,
which writes "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." to fd 2 as it starts, and lines in the formats
of glog, ONNX Runtime and plain C, written with write(2) through ctypes as C code writes them, bypassing Python; and
the check that an engine's log is what it promises, one JSON object a line."""

import ctypes
import json

import flatbuffers
from ai_edge_litert import schema_py_generated as tfl

TFLITE_LINE = "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."
_libc = ctypes.CDLL(None)


def write_fd(fd: int, text: str) -> None:
    data = text.encode()
    _libc.write(fd, data, len(data))


def native_lines(tag: str) -> list[tuple[int, str, str]]:
    """The lines `write_native_lines(tag)` writes: descriptor, line, and the level its JSON line must have."""
    return [
        (2, f"W0000 00:00:1700000000.123456   123 inference_feedback_manager.cc:121] glog for {tag}", "warning"),
        (2, f"2026-11-30 10:00:00.000 [E:onnxruntime:, session.cc:42 Run] onnxruntime for {tag}", "error"),
        (2, f"plain C on stderr for {tag}", "warning"),
        (1, f"printf on stdout for {tag}", "info"),
    ]


def write_native_lines(tag: str) -> None:
    for fd, line, _ in native_lines(tag):
        write_fd(fd, line + "\n")


def not_json(log: str) -> list[str]:
    """The lines of `log` that are not a JSON object each (the start of each, at most ten)."""
    wrong = []
    for line in log.splitlines():
        try:
            if isinstance(json.loads(line), dict):
                continue
        except ValueError:
            pass
        wrong.append(line[:200])
    return wrong[:10]


def start_interpreter():
    """A LiteRT interpreter of a one-ADD model, built here (no file to fetch): LiteRT writes its own line to fd 2."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=_add_model())
    interpreter.allocate_tensors()
    return interpreter


def _add_model() -> bytes:
    model = tfl.ModelT()
    model.version = 3
    add = tfl.OperatorCodeT()
    add.builtinCode = add.deprecatedBuiltinCode = tfl.BuiltinOperator.ADD
    add.version = 1
    model.operatorCodes = [add]
    graph = tfl.SubGraphT()
    graph.tensors = []
    for name in (b"a", b"b", b"sum"):
        tensor = tfl.TensorT()
        tensor.shape, tensor.type, tensor.buffer, tensor.name = [1], tfl.TensorType.FLOAT32, 0, name
        graph.tensors.append(tensor)
    graph.inputs, graph.outputs = [0, 1], [2]
    op = tfl.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0, 1], [2]
    op.builtinOptionsType, op.builtinOptions = tfl.BuiltinOptions.AddOptions, tfl.AddOptionsT()
    graph.operators = [op]
    model.subgraphs = [graph]
    model.buffers = [tfl.BufferT()]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
