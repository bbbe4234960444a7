"""The support package's testing helpers pick ports an engine can really use, and answer for a model as the engine
does."""

import socket

import numpy as np
from spilling_engine.model import SpillingDetector

from chariot_support.dev.testing import answer, as_image, free_ports
from chariot_support.model.clipping import inside_image
from chariot_support.model.tasks import validate_results


def test_free_ports_are_different_and_bindable():
    for _ in range(50):
        ports = free_ports(3)
        assert len(set(ports)) == 3, ports  # a gRPC server would share a repeated port with the REST server
        for port in ports:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))


def test_answer_keeps_a_models_results_inside_the_picture_as_the_engine_does():
    model = SpillingDetector()
    image = as_image(np.zeros((48, 64, 3), np.uint8), action="detect")
    (checked,) = validate_results(model.task_type, model.predict([image], {}), [image.name])
    assert answer(model, image) == inside_image(model.task_type, checked, 64, 48)
    assert [r.label for r in answer(model, image)] == ["top-left", "bottom-right", "inside"], "one lies outside"
