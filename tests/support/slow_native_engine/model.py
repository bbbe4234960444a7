"""A model whose predict runs native code for seconds: an ONNX Runtime graph of chained matrix products, built at
load, slow enough to overrun a short CHARIOT_PREDICT_TIMEOUT while its thread stays inside ONNX Runtime."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from chariot_support import ChariotModel, Detection, TaskType, onnx_session

SIDE = 1024
PRODUCTS = 300  # about 640 GFLOP: several seconds on one thread (0.5 s for 24 here)


def slow_graph() -> bytes:
    weight = numpy_helper.from_array(np.full((SIDE, SIDE), 1e-3, np.float32), name="w")
    nodes, last = [], "x"
    for i in range(PRODUCTS):
        nodes.append(helper.make_node("MatMul", [last, "w"], [f"y{i}"]))
        last = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SIDE, SIDE])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [SIDE, SIDE])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


class SlowNative(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True

    def load(self, model_dir):
        path = model_dir / "slow.onnx"  # MODEL_DIR is the test's temporary folder
        path.write_bytes(slow_graph())
        self.session = onnx_session(path, threads=1)

    def predict(self, images, tensors):
        self.session.run(None, {"x": np.ones((SIDE, SIDE), np.float32)})
        return [[Detection(label="done", score=0.9, xmin=0, xmax=1, ymin=0, ymax=1)] for _ in images]
