"""An author's predict that fails reaches tritonclient as INTERNAL over gRPC and 500 over HTTP, with the
message a plain REST request gets. Run by test_tritonclient.py against the faulty engine."""

import pytest

from tritonclient_support import INTERNAL, MODEL, TRANSPORTS, Client, plain_rest, plain_rest_results, scene_png


@pytest.fixture(scope="module", params=TRANSPORTS)
def client(request) -> Client:
    return Client(request.param)


def test_a_failing_predict_is_internal_and_the_engine_keeps_serving(client):
    rest = plain_rest(MODEL, {"image-0": scene_png()}, {"fault": "raise"})
    assert rest.status_code == 500
    assert "predict failed: RuntimeError" in rest.json()["error"]
    error = client.error(
        lambda: client.infer(MODEL, [client.image("image-0", scene_png())], parameters={"fault": "raise"})
    )
    assert error.status() == INTERNAL[client.transport]
    assert error.message() == rest.json()["error"]
    good = client.infer(MODEL, [client.image("image-0", scene_png())])
    assert client.results(good, "image-0") == plain_rest_results(plain_rest(MODEL, {"image-0": scene_png()}))["image-0"]
