"""The ONNX Runtime session the worked examples load their models with: the model runs, on the CPU here, with the
threads the engine gives each predict, which do not spin for work between calls."""

import numpy as np
import onnx
from onnx import TensorProto, helper

from chariot_support.model.onnx_session import onnx_session


def test_a_session_runs_the_model_with_the_threads_it_is_given(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "negate", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "model.onnx"))

    session = onnx_session(tmp_path / "model.onnx", 3)
    options = session.get_session_options()
    assert options.intra_op_num_threads == 3
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0", "idle threads burn CPU"
    assert "CPUExecutionProvider" in session.get_providers()
    (negated,) = session.run(None, {"x": np.array([1.5, -2.0], np.float32)})
    assert negated.tolist() == [-1.5, 2.0]
