"""End to end: the real engine on real sockets, spoken to as Chariot and V2 clients speak to it."""

import json
import uuid

import pytest
import requests

from chariot_support.dev.testing import chariot_metadata, chariot_request, encode_image, image_input

PROMPTS = ["what colours are in the picture?"]


def infer(engine, model_name, body, path=None, **kwargs):
    path = path or f"/v2/models/{model_name}/infer"
    return requests.post(engine.url + path, data=json.dumps(body), timeout=30, **kwargs)


def test_health_and_metadata(engine, model_name):
    for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{model_name}/ready"):
        assert requests.get(engine.url + path, timeout=5).status_code == 200, path
    assert requests.get(engine.url + "/ready", timeout=5).json() == {"status": "ready"}
    assert requests.get(engine.url + "/v2", timeout=5).json()["name"]
    metadata = requests.get(f"{engine.url}/v2/models/{model_name}", timeout=5).json()
    assert metadata["name"] == model_name
    assert metadata["platform"].startswith("chariot-v2-kserve_")
    assert metadata["inputs"][0]["datatype"] == "BYTES"
    assert metadata["outputs"][0]["datatype"] == "BYTES"
    assert metadata["versions"]


@pytest.mark.parametrize("path", ["/v2/models/{name}/infer", "/v2/models/{name}/infer/", "/infer"])
def test_chariot_paths_answer_directly(engine, model_name, scene, path):
    body = chariot_request(image_input("image-0", scene.pixels, prompts=PROMPTS))
    response = infer(engine, model_name, body, path=path.format(name=model_name), allow_redirects=False)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model_name"] == model_name
    assert answer["model_version"]
    assert [o["name"] for o in answer["outputs"]] == ["image-0"]


def test_any_chariot_model_id_reaches_the_model(engine, model_name, scene):
    body = chariot_request(image_input("image-0", scene.pixels, prompts=PROMPTS))
    deployed = "m-" + uuid.uuid4().hex[:12]
    response = infer(engine, deployed, body, path=f"/v2/models/{deployed}/infer/")
    assert response.status_code == 200, response.text
    assert response.json()["model_name"] == deployed
    assert requests.get(f"{engine.url}/v2/models/{deployed}/ready", timeout=5).status_code == 200


def test_one_output_per_image_input_in_order(engine, model_name, scene):
    names = ["b-image", "a-image", "c-image"]
    body = chariot_request(*(image_input(n, scene.pixels, prompts=PROMPTS) for n in names))
    answer = infer(engine, model_name, body).json()
    assert [o["name"] for o in answer["outputs"]] == names
    for output in answer["outputs"]:
        assert output["datatype"] == "BYTES" and output["shape"] == [1]
        (results,) = output["data"]
        assert isinstance(results, list) and results and all(isinstance(r, dict) for r in results)
    assert answer["outputs"][0]["data"] == answer["outputs"][1]["data"]


def test_non_image_inputs_are_accepted_beside_images(engine, model_name, scene):
    body = chariot_request(
        image_input("image-0", scene.pixels, prompts=PROMPTS),
        {
            "name": "max_new_tokens",
            "shape": [1],
            "datatype": "INT64",
            "data": [500],
            "parameters": {"content_type": "raw"},
        },
        {"name": "temperature", "shape": [1], "datatype": "FP64", "data": [0.8]},
        {
            "name": "weights",
            "shape": [2, -1],
            "datatype": "FP32",
            "data": [[1, 2], [3, 4]],
            "parameters": {"content_type": "np"},
        },
    )
    answer = infer(engine, model_name, body).json()
    assert [o["name"] for o in answer["outputs"]] == ["image-0"]


def test_metadata_passes_through_unchanged(engine, model_name, scene):
    request_metadata = chariot_metadata(a=1, score_threshold=0.55, site="north")
    input_metadata = json.dumps({"extended_metadata": [{"key": "camera", "type": "str", "value": "7"}]})
    body = chariot_request(
        image_input("image-0", scene.pixels, prompts=PROMPTS, metadata=input_metadata),
        image_input("image-1", scene.pixels, prompts=PROMPTS),
        metadata=request_metadata,
    )
    response = infer(engine, model_name, body)
    answer = response.json()
    assert answer["parameters"]["metadata"] == request_metadata
    assert answer["outputs"][0]["parameters"]["metadata"] == input_metadata
    assert "parameters" not in answer["outputs"][1]
    assert "headers" not in answer["parameters"]
    assert response.headers["content-length"] == str(len(response.content))


def test_replies_are_not_gzipped(engine, model_name, scene):
    body = chariot_request(image_input("image-0", scene.pixels, prompts=PROMPTS))
    response = infer(engine, model_name, body, headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert "content-encoding" not in response.headers


def _image_body(scene, **overrides):
    tensor = image_input("image-0", scene.pixels, prompts=PROMPTS)
    tensor.update(overrides)
    return chariot_request(tensor)


def test_an_image_sent_as_jpeg_is_read_too(engine, model_name, scene):
    tensor = {
        "name": "photo",
        "shape": [1],
        "datatype": "BYTES",
        "data": [encode_image(scene.pixels, ".jpg")],
        "parameters": {"prompts": PROMPTS},
    }
    response = infer(engine, model_name, chariot_request(tensor))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_json_is_read_whatever_the_content_type_says(engine, model_name, scene, content_type):
    # curl -d sends form data's content type; many clients send none.
    body = json.dumps(_image_body(scene)).encode()
    headers = {"Content-Type": content_type} if content_type else {}
    request = requests.Request(
        "POST", f"{engine.url}/v2/models/{model_name}/infer", data=body, headers=headers
    ).prepare()
    if content_type is None:
        request.headers.pop("Content-Type", None)
    response = requests.Session().send(request, timeout=30)
    assert response.status_code == 200, response.text
