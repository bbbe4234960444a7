"""The support package's testing helpers pick ports an engine can really use, and answer for a model as the engine
does."""

import socket

import numpy as np
import pytest
from spilling_engine.model import SpillingDetector

from chariot_support.dev.testing import NOTHING, answer, as_image, check_found, free_ports
from chariot_support.model.clipping import inside_image
from chariot_support.model.tasks import Detection, Segmentation, validate_results


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


def test_check_found_holds_a_picture_to_its_labels_or_to_nothing():
    face = Detection(label="face", score=0.97, xmin=1, ymin=2, xmax=30, ymax=40)
    cup = Segmentation(label="cup", score=0.41, contour=[[{"x": 0, "y": 0}, {"x": 9, "y": 0}, {"x": 9, "y": 9}]])
    check_found("team.jpg", {"face"}, [face, cup])  # at least the labels expected: others may be found too
    check_found("team.jpg", {"face"}, [{"label": "face", "score": 0.97}])  # the engine's answer, as dicts
    check_found("wall.jpg", NOTHING, [])
    check_found("wall.jpg", set(), [])  # an empty set is NOTHING: "at least none" would hold for any answer
    with pytest.raises(AssertionError, match=r"^wall.jpg: expected nothing, found 2: face \(0.97\), cup \(0.41\)$"):
        check_found("wall.jpg", NOTHING, [face, cup])
    with pytest.raises(AssertionError, match=r"^wall.jpg: expected nothing, the engine answered 1: face \(0.97\)$"):
        check_found("wall.jpg", set(), [{"label": "face", "score": 0.97}], where="the engine answered")
    with pytest.raises(
        AssertionError, match=r"^cup.jpg: expected \['cup', 'face'\], found cup \(0.41\); missing \['face'\]$"
    ):
        check_found("cup.jpg", {"face", "cup"}, [cup])
    with pytest.raises(AssertionError, match=r"expected \['face'\], found nothing; missing \['face'\]$"):
        check_found("cup.jpg", {"face"}, [])
