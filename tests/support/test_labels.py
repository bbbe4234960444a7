"""A model reads its labels from where Chariot puts them, without writing a parser."""

import json

import pytest

from chariot_support import read_labels


def write(folder, name, content):
    (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))


@pytest.mark.parametrize(
    "class_labels",
    [
        ["cat", "dog", "bird"],
        {"0": "cat", "1": "dog", "2": "bird"},
        {"2": "bird", "0": "cat", "1": "dog"},
        {"cat": 0, "dog": 1, "bird": 2},
    ],
)
def test_class_labels_of_chariots_model_config_in_index_order(tmp_path, class_labels):
    write(tmp_path, "chariot_model_config.json", {"artifact_type": "custom-engine", "class_labels": class_labels})
    assert read_labels(tmp_path) == ["cat", "dog", "bird"]


def test_labels_txt_one_per_line(tmp_path):
    write(tmp_path, "labels.txt", "cat\n dog \n\nbird\n")
    assert read_labels(tmp_path) == ["cat", "dog", "bird"]


def test_the_config_comes_first_and_labels_txt_when_it_has_none(tmp_path):
    write(tmp_path, "labels.txt", "from-text\n")
    write(tmp_path, "chariot_model_config.json", {"class_labels": ["from-config"]})
    assert read_labels(tmp_path) == ["from-config"]
    write(tmp_path, "chariot_model_config.json", {"artifact_type": "custom-engine"})
    assert read_labels(tmp_path) == ["from-text"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("chariot_model_config.json", "{not json", "chariot_model_config.json is not JSON"),
        ("chariot_model_config.json", {"class_labels": {"0": "cat", "2": "dog"}}, "each class index from 0 up"),
        ("chariot_model_config.json", {"class_labels": []}, "must be a list of labels"),
        ("chariot_model_config.json", {"class_labels": [1, 2]}, "must be a list of labels"),
        ("labels.txt", "\n\n", "labels.txt holds no labels"),
    ],
)
def test_a_malformed_file_is_named_with_what_is_wrong(tmp_path, name, content, message):
    write(tmp_path, name, content)
    with pytest.raises(ValueError, match=message) as refused:
        read_labels(tmp_path)
    assert str(tmp_path / name) in str(refused.value)


def test_no_labels_names_both_files_and_model_dir(tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        read_labels(tmp_path)
    message = str(missing.value)
    assert "chariot_model_config.json" in message and "labels.txt" in message and "MODEL_DIR" in message
