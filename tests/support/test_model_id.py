"""How the engine learns its Chariot model id: any m-<id> by default, one id when CHARIOT_MODEL_ID pins it; and one
more name when CHARIOT_MODEL_ALIAS gives it (KServe's InferenceService name)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import requests

from chariot_support.dev.testing import chariot_request, image_input, run_engine

HERE = Path(__file__).parent
BODY = json.dumps(chariot_request(image_input("image-0", np.zeros((16, 16, 3), np.uint8))))


def test_a_pinned_id_answers_alone():
    with run_engine("faulty_engine", src=HERE, env={"CHARIOT_MODEL_ID": "Pinned-42"}) as engine:
        pinned = requests.post(f"{engine.url}/v2/models/m-pinned-42/infer/", data=BODY, timeout=30)
        assert pinned.status_code == 200 and pinned.json()["model_name"] == "m-pinned-42"
        other = requests.post(f"{engine.url}/v2/models/m-other/infer/", data=BODY, timeout=30)
        assert other.status_code == 404 and "m-other" in other.json()["error"]
        root = requests.post(f"{engine.url}/infer", data=BODY, timeout=30)
        assert root.json()["model_name"] == "m-pinned-42"
        assert requests.get(f"{engine.url}/v2/models/m-other/ready", timeout=5).status_code == 404


def test_an_alias_answers_beside_the_m_names_as_kserve_calls_it():
    with run_engine("faulty_engine", src=HERE, env={"CHARIOT_MODEL_ALIAS": "road-signs"}) as engine:
        for name in ("road-signs", "m-any"):
            answered = requests.post(f"{engine.url}/v2/models/{name}/infer", data=BODY, timeout=30)
            assert answered.status_code == 200 and answered.json()["model_name"] == name, answered.text
            assert requests.get(f"{engine.url}/v2/models/{name}/ready", timeout=5).status_code == 200
        other = requests.post(f"{engine.url}/v2/models/road-signs-2/infer", data=BODY, timeout=30)
        assert other.status_code == 404 and "any m-<id> name (it was started as m-faulty) and road-signs" in other.text


def test_an_alias_that_is_no_kubernetes_name_stops_the_engine():
    from chariot_support.server.server import model_id_from_env
    from chariot_support.settings import EngineSettings

    with pytest.raises(ValueError, match="CHARIOT_MODEL_ALIAS 'Road/Signs' is not a name the engine can answer to"):
        model_id_from_env("demo", EngineSettings.from_env({"CHARIOT_MODEL_ALIAS": "Road/Signs"}))


def test_an_id_that_cannot_stand_in_the_url_stops_the_engine_with_a_reason():
    from chariot_support.server.server import model_id_from_env
    from chariot_support.settings import EngineSettings

    # Refused as every setting the engine cannot start with is (one JSON line, exit 2: test_starting_and_stopping).
    with pytest.raises(
        ValueError, match=re.escape("model id 'no/slashes' cannot stand in the URL path /v2/models/m-<id>")
    ):
        model_id_from_env("faulty", EngineSettings.from_env({"CHARIOT_MODEL_ID": "no/slashes"}))


@pytest.mark.parametrize("model_id", ["a" * 63, "0a1b2c-seg", "demo"])
def test_the_engine_takes_the_ids_the_bake_takes(model_id):
    assert model_id_from_env_with(model_id) == model_id


@pytest.mark.parametrize("model_id", ["a" * 64, "demo-", "-demo", "my/model", "a b"])
def test_the_engine_refuses_the_ids_the_bake_refuses(model_id):
    with pytest.raises(ValueError, match="model id"):
        model_id_from_env_with(model_id)


def model_id_from_env_with(model_id: str) -> str:
    from chariot_support import model_id as rule
    from chariot_support.server.server import model_id_from_env
    from chariot_support.settings import EngineSettings

    chosen = model_id_from_env(model_id, EngineSettings())  # no CHARIOT_MODEL_ID: the default is checked
    assert rule.problem(model_id) is None  # the rule the bake hook loads from this same file agrees
    return chosen
