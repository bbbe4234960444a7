"""Native code writing to the process's file descriptors, for the fixture models: a real LiteRT (TFLite) interpreter,
which writes "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." to fd 2 as it starts, and lines in the formats
of glog, ONNX Runtime and plain C, written with write(2) through ctypes as C code writes them, bypassing Python; and
the check that an engine's log is what it promises, one JSON object a line."""

import base64
import ctypes
import json

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
    """A LiteRT interpreter of ADD_MODEL: LiteRT writes its own line to fd 2 as it starts."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=base64.b64decode(ADD_MODEL))
    interpreter.allocate_tensors()
    a, b = (detail["index"] for detail in interpreter.get_input_details())
    interpreter.set_tensor(a, np.array([1.0], np.float32))
    interpreter.set_tensor(b, np.array([2.0], np.float32))
    interpreter.invoke()
    assert interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).tolist() == [3.0]
    return interpreter


# A TFLite model of one ADD of two float32[1] tensors ("a" + "b" = "sum"), 312 bytes, written once with LiteRT's
# flatbuffer schema (ai_edge_litert.schema_py_generated's ModelT, SubGraphT, OperatorT...): importing that schema costs
# each process 0.4 s of CPU, the model's bytes nothing.
ADD_MODEL = (
    "GAAAAFRGTDMAAA4AFAAQAAwACAAAAAQADgAAABAAAAAYAAAABAEAAAMAAAABAAAABAAAAAT///8BAAAAEAAAAAwAFAAQAAwACAAE"
    "AAwAAAAQAAAAUAAAAFQAAABcAAAAAQAAABQAAAAAAA4AFAAAABAADAALAAQADgAAABAAAAAAAAALDAAAABAAAABc////AQAAAAIA"
    "AAACAAAAAAAAAAEAAAABAAAAAgAAAAIAAAAAAAAAAQAAAAMAAABQAAAAJAAAAAQAAADI////CAAAAAwAAAADAAAAc3VtAAEAAAAB"
    "AAAA5P///wgAAAAMAAAAAQAAAGIAAAABAAAAAQAAAAwADAAIAAAAAAAEAAwAAAAIAAAADAAAAAEAAABhAAAAAQAAAAEAAAABAAAA"
    "CAAAAAQABAAEAAAA"
)
