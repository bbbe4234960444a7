"""The gRPC messages of Triton's statistics and model configuration extensions (ModelStatistics and ModelConfig of
`inference.GRPCInferenceService`), declared here field by field with the numbers and types of Triton's
grpc_service.proto and model_config.proto, for the fields the engine fills. MLServer's generated service has neither
call. They are built in a descriptor pool of their own, under a package of their own: the wire carries field numbers,
never type names, and nothing clashes with MLServer's messages of the same names in protobuf's default pool.

A client compiled from Triton's .proto files (tritonclient) reads them as its own; fields Triton declares and these
do not are left at their defaults, as for any message a server leaves them unset in."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

PACKAGE = "chariot_support.triton"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
}

# Each message: (field, number, type, repeated). A type that is not a scalar names a message or an enum here; a
# map is "map<string, Type>".
MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    "ModelConfigRequest": [("name", 1, "string", False), ("version", 2, "string", False)],
    "ModelConfigResponse": [("config", 1, "ModelConfig", False)],
    "ModelConfig": [
        ("name", 1, "string", False),
        ("platform", 2, "string", False),
        ("max_batch_size", 4, "int32", False),
        ("input", 5, "ModelInput", True),
        ("output", 6, "ModelOutput", True),
        ("instance_group", 7, "ModelInstanceGroup", True),
        ("dynamic_batching", 11, "ModelDynamicBatching", False),  # in Triton's oneof scheduling_choice
        ("parameters", 14, "map<string, ModelParameter>", False),
        ("backend", 17, "string", False),
        ("model_transaction_policy", 19, "ModelTransactionPolicy", False),
    ],
    "ModelInput": [
        ("name", 1, "string", False),
        ("data_type", 2, "DataType", False),
        ("format", 3, "ModelInput.Format", False),
        ("dims", 4, "int64", True),
        ("optional", 8, "bool", False),
    ],
    "ModelOutput": [("name", 1, "string", False), ("data_type", 2, "DataType", False), ("dims", 3, "int64", True)],
    "ModelInstanceGroup": [
        ("name", 1, "string", False),
        ("count", 2, "int32", False),
        ("gpus", 3, "int32", True),
        ("kind", 4, "ModelInstanceGroup.Kind", False),
    ],
    "ModelDynamicBatching": [
        ("preferred_batch_size", 1, "int32", True),
        ("max_queue_delay_microseconds", 2, "uint64", False),
    ],
    "ModelParameter": [("string_value", 1, "string", False)],
    "ModelTransactionPolicy": [("decoupled", 1, "bool", False)],
    "ModelStatisticsRequest": [("name", 1, "string", False), ("version", 2, "string", False)],
    "ModelStatisticsResponse": [("model_stats", 1, "ModelStatistics", True)],
    "ModelStatistics": [
        ("name", 1, "string", False),
        ("version", 2, "string", False),
        ("last_inference", 3, "uint64", False),
        ("inference_count", 4, "uint64", False),
        ("execution_count", 5, "uint64", False),
        ("inference_stats", 6, "InferStatistics", False),
        ("batch_stats", 7, "InferBatchStatistics", True),
    ],
    "InferStatistics": [
        ("success", 1, "StatisticDuration", False),
        ("fail", 2, "StatisticDuration", False),
        ("queue", 3, "StatisticDuration", False),
        ("compute_input", 4, "StatisticDuration", False),
        ("compute_infer", 5, "StatisticDuration", False),
        ("compute_output", 6, "StatisticDuration", False),
        ("cache_hit", 7, "StatisticDuration", False),
        ("cache_miss", 8, "StatisticDuration", False),
    ],
    "InferBatchStatistics": [
        ("batch_size", 1, "uint64", False),
        ("compute_input", 2, "StatisticDuration", False),
        ("compute_infer", 3, "StatisticDuration", False),
        ("compute_output", 4, "StatisticDuration", False),
    ],
    "StatisticDuration": [("count", 1, "uint64", False), ("ns", 2, "uint64", False)],
}

# Enums, with Triton's numbers: top-level ones, and those nested in a message ("Message.Enum").
ENUMS: dict[str, list[tuple[str, int]]] = {
    "DataType": [
        ("TYPE_INVALID", 0),
        ("TYPE_BOOL", 1),
        ("TYPE_UINT8", 2),
        ("TYPE_UINT16", 3),
        ("TYPE_UINT32", 4),
        ("TYPE_UINT64", 5),
        ("TYPE_INT8", 6),
        ("TYPE_INT16", 7),
        ("TYPE_INT32", 8),
        ("TYPE_INT64", 9),
        ("TYPE_FP16", 10),
        ("TYPE_FP32", 11),
        ("TYPE_FP64", 12),
        ("TYPE_STRING", 13),
        ("TYPE_BF16", 14),
    ],
    "ModelInput.Format": [("FORMAT_NONE", 0), ("FORMAT_NHWC", 1), ("FORMAT_NCHW", 2)],
    "ModelInstanceGroup.Kind": [("KIND_AUTO", 0), ("KIND_GPU", 1), ("KIND_CPU", 2), ("KIND_MODEL", 3)],
}


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name=f"{PACKAGE.replace('.', '/')}.proto", package=PACKAGE)
    file.syntax = "proto3"
    enums = set(ENUMS)
    messages = {}
    for name, fields in MESSAGES.items():
        message = messages[name] = file.message_type.add(name=name)
        for field_name, number, kind, repeated in fields:
            field = message.field.add(name=field_name, number=number)
            field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if kind.startswith("map<"):
                key, value = (part.strip() for part in kind[4:-1].split(","))
                entry = message.nested_type.add(name=f"{field_name.title().replace('_', '')}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_SCALARS[key], label=_F.LABEL_OPTIONAL)
                entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE, type_name=f".{PACKAGE}.{value}")
                entry.field[1].label = _F.LABEL_OPTIONAL
                field.label, field.type, field.type_name = (
                    _F.LABEL_REPEATED,
                    _F.TYPE_MESSAGE,
                    f".{PACKAGE}.{name}.{entry.name}",
                )
            elif kind in _SCALARS:
                field.type = _SCALARS[kind]
            else:
                field.type = _F.TYPE_ENUM if kind in enums else _F.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{kind}"
    for name, values in ENUMS.items():
        owner, _, enum_name = name.rpartition(".")
        enum = (messages[owner].enum_type if owner else file.enum_type).add(name=enum_name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    return file


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())


def message_class(name: str) -> type:
    """The message class of one of MESSAGES."""
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))


ModelConfigRequest = message_class("ModelConfigRequest")
ModelConfigResponse = message_class("ModelConfigResponse")
ModelStatisticsRequest = message_class("ModelStatisticsRequest")
ModelStatisticsResponse = message_class("ModelStatisticsResponse")


def from_json(message_type: type, value: dict[str, Any]) -> Any:
    """A message of `message_type` holding `value`, the JSON REST answers with; fields the messages do not declare
    (those Triton's JSON holds for REST clients: response_stats, memory_usage) are left out."""
    return json_format.ParseDict(value, message_type(), ignore_unknown_fields=True)
