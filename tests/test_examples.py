"""The worked examples every engine carries in examples/model.py are real code: each loads a tiny model built here
(ONNX graphs whose answers follow from the picture, a randomly initialised BLIP) and answers what that model
implies; one runs in a baked engine whose own suite stays green. Those that need torch (marked `torch`: the PyTorch
and transformers examples) run in scripts/test-torch's venv."""

import importlib.util
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import onnx
import PIL.Image
import pytest
from onnx import TensorProto, helper

from baking import bake
from chariot_support.dev.testing import answer, as_image
from chariot_support.errors import BadRequest
from template_paths import ENGINE_TEMPLATE

SIDE = 32  # the input size the tiny models are exported for
LABELS = ["red", "green", "blue"]


def example(task: str, file: str = "example_model.py"):
    path = ENGINE_TEMPLATE / "_tasks" / task / file
    spec = importlib.util.spec_from_file_location(f"example_{task}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model


def constant(name: str, values, dtype=TensorProto.FLOAT):
    array = np.asarray(values)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, array.shape, array.flatten()))


def channel_mean(channel: int, out: str) -> list:
    """Nodes computing one colour channel's mean per picture (shape N), from the input `pixels`."""
    return [
        constant(f"index{channel}", [channel], TensorProto.INT64),
        helper.make_node("Gather", ["pixels", f"index{channel}"], [f"plane{channel}"], axis=1),
        helper.make_node("ReduceMean", [f"plane{channel}"], [out], axes=[1, 2, 3], keepdims=0),
    ]


def save(nodes: list, outputs: list, folder: Path) -> Path:
    pixels = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 3, SIDE, SIDE])
    graph = helper.make_graph(nodes, "tiny", [pixels], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return folder


def output(name: str, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def loaded(task: str, folder: Path):
    model = example(task)()
    model.load(folder)
    return model


def picture(width: int, height: int, colour, box=None) -> np.ndarray:
    pixels = np.zeros((height, width, 3), np.uint8)
    x0, y0, x1, y1 = box or (0, 0, width, height)
    pixels[y0:y1, x0:x1] = colour
    return pixels


def test_classification_scores_every_label_by_the_models_logits(tmp_path):
    # The logits are the mean of each colour channel: a mostly red picture is "red".
    nodes = [helper.make_node("ReduceMean", ["pixels"], ["logits"], axes=[2, 3], keepdims=0)]
    model = loaded("image_classification", save(nodes, [output("logits", TensorProto.FLOAT, ["N", 3])], tmp_path))
    pixels = picture(64, 48, (255, 0, 0), (0, 0, 48, 48))
    results = answer(model, as_image(pixels, action="predict_proba"))
    means = cv2.resize(pixels, (SIDE, SIDE)).reshape(-1, 3).mean(axis=0) / 255
    expected = np.exp(means) / np.exp(means).sum()
    assert results[0].label == "red", "best first"
    assert {r.label: r.score for r in results} == pytest.approx(dict(zip(LABELS, expected, strict=True)), abs=1e-5)
    two = model.predict([as_image(pixels), as_image(picture(20, 20, (0, 0, 255)))], {})
    assert [max(r, key=lambda c: c.score).label for r in two] == ["red", "blue"], "a batch of pictures"


def one_red_box_model(folder: Path) -> Path:
    """A detector that finds one box at (4, 8)-(12, 16) of its 32x32 input, scored by the picture's redness, class 0."""
    nodes = [
        constant("boxes", [[4.0, 8.0, 12.0, 16.0]]),
        *channel_mean(0, "scores"),
        constant("classes", [0], TensorProto.INT64),
    ]
    outputs = [
        output("boxes", TensorProto.FLOAT, [1, 4]),
        output("scores", TensorProto.FLOAT, [1]),
        output("classes", TensorProto.INT64, [1]),
    ]
    return save(nodes, outputs, folder)


def test_detection_scales_the_models_boxes_back_to_the_picture(tmp_path):
    model = loaded("object_detection", one_red_box_model(tmp_path))
    (box,) = answer(model, as_image(picture(64, 48, (255, 0, 0), (0, 0, 32, 48))))
    assert box.label == "red" and box.score == pytest.approx(0.5, abs=0.02)
    assert (box.xmin, box.ymin, box.xmax, box.ymax) == pytest.approx((8, 12, 24, 24))


def test_oriented_detection_gives_the_models_box_normalised(tmp_path):
    nodes = [
        constant("boxes", [[16.0, 16.0, 8.0, 4.0, 0.3]]),
        *channel_mean(1, "scores"),
        constant("classes", [1], TensorProto.INT64),
    ]
    outputs = [
        output("boxes", TensorProto.FLOAT, [1, 5]),
        output("scores", TensorProto.FLOAT, [1]),
        output("classes", TensorProto.INT64, [1]),
    ]
    model = loaded("oriented_object_detection", save(nodes, outputs, tmp_path))
    (box,) = answer(model, as_image(picture(96, 96, (0, 255, 0))))
    assert box.label == "green" and box.score == pytest.approx(1.0)
    assert (box.cx, box.cy, box.w, box.h, box.r) == pytest.approx((0.5, 0.5, 0.25, 0.125, 0.3))
    assert abs(box.r) <= math.pi / 4


def test_segmentation_outlines_where_the_model_puts_a_class(tmp_path):
    # Class 1 ("green" in labels.txt order) wherever the red channel beats the background's constant 0.5.
    nodes = [
        *channel_mean(0, "unused"),
        constant("zero", [0.0]),
        constant("half", [0.5]),
        helper.make_node("Mul", ["plane0", "zero"], ["nothing"]),
        helper.make_node("Add", ["nothing", "half"], ["background"]),
        helper.make_node("Concat", ["background", "plane0"], ["logits"], axis=1),
    ]
    model = loaded(
        "image_segmentation",
        save(nodes, [output("logits", TensorProto.FLOAT, ["N", 2, SIDE, SIDE])], tmp_path),
    )
    (region,) = answer(model, as_image(picture(64, 64, (255, 0, 0), (16, 16, 48, 48))))
    assert region.label == "green"
    assert region.score == pytest.approx(math.exp(1) / (math.exp(1) + math.exp(0.5)), abs=1e-4)
    (outline,) = region.contour
    xs, ys = [p["x"] for p in outline], [p["y"] for p in outline]
    assert (min(xs), min(ys), max(xs), max(ys)) == (16, 16, 47, 47)
    assert answer(model, as_image(picture(64, 64, (0, 0, 255)))) == [], "nothing red, no region"


@pytest.mark.torch
def test_the_transformers_example_answers_each_prompt(tmp_path):
    import torch
    from transformers import BertTokenizer, BlipConfig, BlipForQuestionAnswering, BlipImageProcessor, BlipProcessor

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "red", "picture", "what", "is", "in", "the", "?"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokens = {"bos_token_id": 2, "sep_token_id": 3, "pad_token_id": 0}
    # Weights drawn wide, so that the answer depends on the picture and on the prompt.
    tiny = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}
    tiny["initializer_range"] = 1.0
    config = BlipConfig(
        text_config={"vocab_size": len(vocab), "max_position_embeddings": 64, **tiny, **tokens},
        vision_config={"image_size": SIDE, "patch_size": 16, **tiny},
        projection_dim=16,
    )
    torch.manual_seed(0)  # random weights, but the same ones every run, so the answer is the same every run
    BlipForQuestionAnswering(config).save_pretrained(tmp_path)
    processor = BlipProcessor(
        image_processor=BlipImageProcessor(size={"height": SIDE, "width": SIDE}),
        tokenizer=BertTokenizer(str(tmp_path / "vocab.txt")),
    )
    processor.save_pretrained(tmp_path)
    model = loaded("image_text_to_text", tmp_path)
    prompts = ["what is in the picture?", "is it red?"]
    red = picture(60, 40, (255, 0, 0))
    answers = answer(model, as_image(red, prompts=prompts))
    assert [a.prompt for a in answers] == prompts
    # The same network asked by hand, the picture given as Pillow holds it: the example must answer as it does.
    network = BlipForQuestionAnswering.from_pretrained(tmp_path).eval()
    expected = []
    for prompt in prompts:
        inputs = processor(images=PIL.Image.fromarray(red), text=prompt, return_tensors="pt")
        with torch.inference_mode():
            tokens = network.generate(**inputs, max_new_tokens=64)
        expected.append(processor.decode(tokens[0], skip_special_tokens=True))
    assert [a.answer for a in answers] == expected
    assert len(set(expected)) == 2, "each prompt is asked: the two get different answers"
    (blue,) = answer(model, as_image(picture(60, 40, (0, 0, 255)), prompts=prompts[:1]))
    assert blue.answer != expected[0], "the picture is read in its own colours"
    with pytest.raises(BadRequest, match="send them in 'prompts'"):  # a question-answering model needs a question
        answer(model, as_image(red))


YOLO_SIDE = 64


def yolo_model(folder: Path, *, names_in_the_model: bool = False) -> Path:
    """A YOLO export's interface: `images` (1 x 3 x 64 x 64) in, raw candidates `output0` (1 x (4 + 3) x 5) out,
    each column cx cy w h in input pixels, then a score per class (red, green, blue):

    0. (20, 24)-(44, 40), red: the mean red of the input there (1 for a red box letterboxed to that place);
    1. one pixel to the right, red, 0.6: overlaps 0 by IoU 0.92, so suppression drops it;
    2. where 0 is, green, 0.5: another class, kept;
    3. (4, 8)-(12, 24), blue: the mean green of the input there, half the letterbox's grey padding (114 / 255)
       and half the picture's black;
    4. anywhere, red, 0.005: under the example's floor."""
    candidates = np.zeros((1, 7, 5), np.float32)
    candidates[0, :4] = np.array(
        [[32, 32, 24, 16], [33, 32, 24, 16], [32, 32, 24, 16], [8, 16, 8, 16], [50, 50, 4, 4]]
    ).T
    candidates[0, 4 + 0, 1], candidates[0, 4 + 1, 2], candidates[0, 4 + 0, 4] = 0.6, 0.5, 0.005

    def region_mean(name: str, channel: int, x0: int, y0: int, x1: int, y1: int) -> list:
        return [
            constant(f"{name}_starts", [0, channel, y0, x0], TensorProto.INT64),
            constant(f"{name}_ends", [1, channel + 1, y1, x1], TensorProto.INT64),
            helper.make_node("Slice", ["images", f"{name}_starts", f"{name}_ends"], [f"{name}_region"]),
            helper.make_node("ReduceMean", [f"{name}_region"], [name], keepdims=0),
        ]

    def one_hot(name: str, row: int, column: int):
        mask = np.zeros((1, 7, 5), np.float32)
        mask[0, row, column] = 1
        return constant(name, mask)

    nodes = [
        *region_mean("red", 0, 20, 24, 44, 40),
        *region_mean("padding", 1, 4, 8, 12, 24),
        constant("candidates", candidates),
        one_hot("red_place", 4 + 0, 0),
        one_hot("padding_place", 4 + 2, 3),
        helper.make_node("Mul", ["red_place", "red"], ["red_score"]),
        helper.make_node("Mul", ["padding_place", "padding"], ["padding_score"]),
        helper.make_node("Add", ["candidates", "red_score"], ["partial"]),
        helper.make_node("Add", ["partial", "padding_score"], ["output0"]),
    ]
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, YOLO_SIDE, YOLO_SIDE])
    graph = helper.make_graph(nodes, "yolo", [images], [output("output0", TensorProto.FLOAT, [1, 7, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if names_in_the_model:
        helper.set_model_props(model, {"names": str(dict(enumerate(LABELS)))})
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    if not names_in_the_model:
        (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return folder


@pytest.mark.parametrize("names_in_the_model", [False, True], ids=["labels.txt", "names in the export"])
def test_the_yolo_example_letterboxes_suppresses_and_maps_boxes_back(tmp_path, names_in_the_model):
    model = example("object_detection", "example_yolo.py")()
    model.load(yolo_model(tmp_path, names_in_the_model=names_in_the_model))
    # 128 x 64 letterboxed into 64 x 64: scale 0.5, 16 rows of padding on top. The red box (40, 16)-(88, 48) lands
    # at (20, 24)-(44, 40) of the input, where candidate 0 is.
    pixels = picture(128, 64, (255, 0, 0), (40, 16, 88, 48))
    found = [(r.label, r.score, (r.xmin, r.ymin, r.xmax, r.ymax)) for r in answer(model, as_image(pixels))]
    assert found == [
        ("red", pytest.approx(1.0), pytest.approx((40, 16, 88, 48))),
        ("green", pytest.approx(0.5), pytest.approx((40, 16, 88, 48))),
        ("blue", pytest.approx(114 / 255 / 2, abs=1e-6), pytest.approx((8, 0, 24, 16))),
    ]
    above = answer(model, as_image(pixels, score_threshold=0.45))
    assert [r.label for r in above] == ["red", "green"]
    # In a blue picture candidate 0 scores 0, so nothing suppresses candidate 1, one input pixel to its right.
    blue = picture(128, 64, (0, 0, 255))
    first, second = model.predict([as_image(pixels), as_image(blue)], {})
    assert [r.label for r in first] == ["red", "green", "blue"]
    assert [(r.label, r.score, (r.xmin, r.ymin, r.xmax, r.ymax)) for r in second][0] == (
        "red",
        pytest.approx(0.6),
        pytest.approx((42, 16, 90, 48)),
    )


@pytest.mark.bake
def test_an_example_serves_in_a_baked_engine_whose_suite_stays_green(tmp_path):
    root = bake("Object Detection", tmp_path)
    package = root.name.replace("-", "_")
    assert (root / "examples" / "model.py").read_text() == (
        ENGINE_TEMPLATE / "_tasks" / "object_detection" / "example_model.py"
    ).read_text(), "the engine carries its task's example"
    shutil.copy(root / "examples" / "model.py", root / "src" / package / "model.py")
    folder = tmp_path / "model"
    folder.mkdir()
    one_red_box_model(folder)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ignore=tests/test_task.py"],
        cwd=root,
        env={**os.environ, "MODEL_DIR": str(folder)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert "failed" not in result.stdout and " passed" in result.stdout


# The PyTorch example, MTCNN with the weights its wheel carries, on real photos: scikit-image's astronaut (Eileen
# Collins, her face near x 170-280, y 70-190) and its coffee cup, which has no face. torch's CUDA build and
# facenet-pytorch make these a job of their own (scripts/test-torch).


def torch_example():
    import skimage.data

    model = example("object_detection", "example_torch.py")()
    model.load(Path("/nonexistent"))  # no pnet.pt, rnet.pt, onet.pt here: the wheel's own weights
    return model, skimage.data


@pytest.mark.torch
def test_the_torch_example_finds_the_face_clips_it_to_the_picture_and_finds_nothing_in_a_coffee_cup(caplog):
    import torch

    with caplog.at_level("INFO"):
        model, photos = torch_example()
    assert model.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    # It says where it runs: on a GPU node without a GPU request torch would take the CPU silently.
    assert (
        f"MTCNN on {model.device} (torch {torch.__version__}" in caplog.text and "weights: the wheel's" in caplog.text
    )
    astronaut = photos.astronaut()
    (face,) = answer(model, as_image(astronaut))
    print(f"astronaut: {face}")
    assert face.label == "face" and face.score > 0.95
    # Her eyes are near (205, 115) and (245, 115), her chin at y 170: the box holds them, and no more than her head.
    assert 150 < face.xmin < 200 and 250 < face.xmax < 300, face
    assert 40 < face.ymin < 105 and 165 < face.ymax < 200, face
    coffee = answer(model, as_image(photos.coffee()))
    print(f"coffee: {coffee}")
    assert coffee == []
    # The face cut by the picture's edges: MTCNN's box reaches past them (to x -62 with the left 200 columns cut
    # off, to x 280 with all but the left 260 cut off); the example's stops at the edge.
    left = np.ascontiguousarray(astronaut[:, 200:])
    right = np.ascontiguousarray(astronaut[:, :260])
    raw_left, raw_right = (model.mtcnn.detect(pixels)[0][0] for pixels in (left, right))
    assert raw_left[0] < 0 and raw_right[2] > 260, "MTCNN reaches past the edges here"
    (cut_left,), (cut_right,) = model.predict([as_image(left), as_image(right)], {})
    print(f"cut at x 200: {cut_left}; cut at x 260: {cut_right}")
    assert cut_left.xmin == 0 and 0 < cut_left.xmax < 90, cut_left
    assert cut_right.xmax == 260 and 150 < cut_right.xmin < 200, cut_right
    # A batch: two pictures of one size go through together, a third of another size on its own; each gets the
    # answer it gets alone.
    batch = model.predict([as_image(astronaut), as_image(photos.coffee()), as_image(astronaut[::-1].copy())], {})
    assert [len(found) for found in batch[:2]] == [1, 0]
    assert (batch[0][0].xmin, batch[0][0].ymax) == pytest.approx((face.xmin, face.ymax), abs=0.5)


@pytest.mark.torch
@pytest.mark.bake
def test_the_torch_example_serves_in_a_baked_engine_whose_suite_stays_green(tmp_path):
    """As a user would put it in: examples/torch_model.py as model.py, the two photos in samples/, and EXPECTED saying
    a face in one and nothing in the other; the engine's whole suite then runs, none of it skipped (the weights are
    the wheel's, so MODEL_DIR is not needed)."""
    import re

    import skimage.data

    root = bake("Object Detection", tmp_path)
    package = root.name.replace("-", "_")
    shutil.copy(root / "examples" / "torch_model.py", root / "src" / package / "model.py")
    for old in (root / "samples").iterdir():
        old.unlink()
    for name, photo in {"astronaut.png": skimage.data.astronaut(), "coffee.png": skimage.data.coffee()}.items():
        cv2.imwrite(str(root / "samples" / name), cv2.cvtColor(photo, cv2.COLOR_RGB2BGR))
    test_task = root / "tests" / "test_task.py"
    table = 'EXPECTED = {"samples/astronaut.png": {"face"}, "samples/coffee.png": set()}\n'
    source, replaced = re.subn(r"^EXPECTED = \{\n.*?^\}\n", table, test_task.read_text(), count=1, flags=re.M | re.S)
    assert replaced == 1
    test_task.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "MODEL_DIR"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary
    # And the table's "nothing" is a real check: with the astronaut said to hold nothing, the model's test and the
    # engine's both fail, naming what was found.
    test_task.write_text(source.replace('"samples/astronaut.png": {"face"}', '"samples/astronaut.png": set()'))
    command += ["tests/test_task.py", "-k", "astronaut"]
    failed = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert failed.returncode == 1 and "2 failed" in failed.stdout, failed.stdout[-3000:]
    assert "samples/astronaut.png: expected nothing, found 1: face (" in failed.stdout
    assert "samples/astronaut.png: expected nothing, the engine answered 1: face (" in failed.stdout
