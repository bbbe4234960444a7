"""The rough edges a newcomer meets with the client and the engine: connection failures in one sentence, colours
that match colour labels, answers drawn beside the picture rather than over it, the chariot-v2 protocol from the
client, lowercase model ids and data URL prefixes explained."""

import json
import socket
import threading

import cv2
import numpy as np
import pytest
import requests

from chariot_support.client import cli as client
from chariot_support.client import drawing
from chariot_support.dev.testing import chariot_request, encode_image, free_port, image_input
from chariot_support.model.tasks import TaskType
from template_paths import ENGINE_TEMPLATE

SAMPLES = ENGINE_TEMPLATE / "samples"
PROMPT = ["--prompt", "what colours are in the picture?"]


def one_sentence(capsys, argv) -> str:
    code = client.main(argv)
    err = capsys.readouterr().err
    assert code == 1, err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and "Traceback" not in err
    return line


def test_the_grpc_port_is_one_sentence_naming_the_rest_port(engine, capsys):
    line = one_sentence(capsys, [str(SAMPLES / "scene.png"), "--url", f"http://{engine.grpc_address}"])
    assert "not answer as an HTTP server" in line and "REST port" in line


def test_a_closed_port_is_one_sentence(capsys):
    line = one_sentence(capsys, [str(SAMPLES / "scene.png"), "--url", f"http://127.0.0.1:{free_port()}"])
    assert "cannot reach" in line


@pytest.mark.parametrize("reply", [b"", b"garbage that is not HTTP\r\n\r\n"], ids=["hang-up", "garbage"])
def test_a_server_that_hangs_up_or_speaks_garbage_is_one_sentence(capsys, reply):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer():
        connection, _ = server.accept()
        connection.recv(65536)
        connection.sendall(reply)
        connection.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        line = one_sentence(capsys, [str(SAMPLES / "scene.png"), "--url", f"http://127.0.0.1:{port}"])
    finally:
        thread.join(5)
        server.close()
    assert "not answer as an HTTP server" in line


def test_a_label_that_names_a_colour_is_drawn_in_it():
    blank = np.zeros((200, 300, 3), np.uint8)
    results = [
        {"label": name, "score": 0.9, "xmin": 10 + 90 * i, "ymin": 60, "xmax": 80 + 90 * i, "ymax": 180}
        for i, name in enumerate(("red", "green", "blue"))
    ]
    drawn = drawing.draw(blank, results)
    for i, bgr in enumerate(((0, 0, 255), (0, 255, 0), (255, 0, 0))):
        edge = drawn[120, 10 + 90 * i]  # the left side of the box, away from its caption
        assert tuple(int(v) for v in edge) == bgr


def test_other_labels_keep_one_colour_each():
    assert drawing.colour_of("cat") == drawing.colour_of("cat")
    assert drawing.colour_of("cat") in drawing.PALETTE
    assert drawing.colour_of("Red") == (0, 0, 255)


@pytest.mark.parametrize(
    "results",
    [
        [{"prompt": "What colours are in the picture?", "answer": "I found 1 red region and 1 blue region. " * 4}],
        [{"label": "red", "score": 0.7}, {"label": "green", "score": 0.2}],
    ],
    ids=["prompt-answer", "classification"],
)
def test_text_results_go_in_a_band_below_the_picture(results):
    picture = cv2.imread(str(SAMPLES / "shapes.jpg"))
    drawn = drawing.draw(picture, results)
    height, width = picture.shape[:2]
    assert drawn.shape[1] == width and drawn.shape[0] > height
    assert np.array_equal(drawn[:height], picture), "the picture must stay whole"
    assert (drawn[height:] > 100).any(), "the band holds the text"


def test_client_chariot_v2_gets_the_same_results_as_kserve(engine, task, capsys):
    argv = [str(SAMPLES / "scene.png"), "--url", engine.url, "--model-id", "demo", "--json", *PROMPT]
    assert client.main(argv) == 0
    kserve = json.loads(capsys.readouterr().out)
    assert client.main([*argv, "--protocol", "chariot-v2"]) == 0
    v2 = json.loads(capsys.readouterr().out)
    assert v2["outputs"][0]["data"] == kserve["outputs"][0]["data"]


def test_client_chariot_v2_batches_as_jsonl(engine, tmp_path, capsys):
    out = tmp_path / "drawn"
    argv = [
        str(SAMPLES / "scene.png"),
        str(SAMPLES / "shapes.jpg"),
        "--url",
        engine.url,
        "--batch",
        "2",
        "--protocol",
        "chariot-v2",
        "--draw",
        str(out),
        *PROMPT,
    ]
    assert client.main(argv) == 0, capsys.readouterr().err
    assert (out / "scene.png").is_file() and (out / "shapes.png").is_file()


def test_client_chariot_v2_refuses_metadata(capsys):
    code = client.main([str(SAMPLES / "scene.png"), "--protocol", "chariot-v2", "--metadata", "{}"])
    assert code == 2 and "chariot-v2-kserve" in capsys.readouterr().err


def test_an_uppercase_model_id_is_told_ids_are_lowercase(engine, task, scene):
    parameters = {"prompts": ["what?"]} if task is TaskType.IMAGE_TEXT_TO_TEXT else {}
    reply = requests.post(
        f"{engine.url}/v2/models/m-Demo/infer",
        json=chariot_request(image_input("a", scene.pixels, **parameters)),
        timeout=30,
    )
    assert reply.status_code == 404
    assert "lowercase" in reply.json()["error"] and "'m-demo'" in reply.json()["error"]


def test_a_data_url_prefix_is_told_to_go(engine, task, scene):
    data = f"data:image/png;base64,{encode_image(scene.pixels)}"
    parameters = {"prompts": ["what?"]} if task is TaskType.IMAGE_TEXT_TO_TEXT else {}
    body = {"inputs": [{"name": "a", "shape": [1], "datatype": "BYTES", "data": [data], "parameters": parameters}]}
    reply = requests.post(f"{engine.url}/v2/models/m-demo/infer", json=body, timeout=30)
    assert reply.status_code == 400
    assert "drop the prefix" in reply.json()["error"] and "data:image/png;base64," in reply.json()["error"]
    v1 = requests.post(f"{engine.url}/v1/models/m-demo:predict", json={"instances": [{"b64": data}]}, timeout=30)
    assert v1.status_code == 400 and "drop the prefix" in v1.json()["error"]


def test_a_red_region_drawn_red_on_a_red_shape_still_shows(scene):
    from chariot_support.model.tasks import Segmentation

    before = cv2.cvtColor(scene.pixels, cv2.COLOR_RGB2BGR)
    mask = np.zeros(scene.pixels.shape[:2], np.uint8)
    xmin, ymin, xmax, ymax = scene.red_box
    mask[ymin:ymax, xmin:xmax] = 1
    after = drawing.draw(before, [Segmentation.from_mask("red", 0.9, mask).model_dump()])
    assert not np.array_equal(before[60, 60], after[60, 60]), "the lighter tint shows inside"
    assert (after[ymax - 4 : ymax + 3, 60] != before[ymax - 4 : ymax + 3, 60]).any(), "the dark edge shows"
