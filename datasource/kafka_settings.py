"""``kafka.*`` options of ``gtkafka`` as kafka-python ``KafkaConsumer`` arguments.

The Kafka name with dots turned into underscores (``kafka.security.protocol`` ->
``security_protocol``) must be one of ``KafkaConsumer.DEFAULT_CONFIG``; values are
converted to the type of its default. Settings that would break replayable reads are
refused with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from state.errors import ConfigError, UnknownOptionError
from state.options import Options

# kafka-python settings that would break replayable reads, with the reason.
REFUSED_KAFKA = {
    "auto_offset_reset": "gtkafka seeks to exact offsets; a reset would silently skip or repeat "
    "records (use startingOffsets, and failOnDataLoss for out-of-range offsets)",
    "enable_auto_commit": "gtkafka never commits consumer offsets for recovery "
    "(use commitOffsetsToGroup to publish progress)",
    "key_deserializer": "keys are returned as binary; deserialize in Spark",
    "value_deserializer": "values are returned as binary; deserialize in Spark",
    "group_id": "gtkafka reads assigned partitions without a consumer group "
    "(use commitOffsetsToGroup to publish progress to a group)",
    "group_instance_id": "gtkafka reads without a consumer group",
    "allow_auto_create_topics": "gtkafka never creates topics",
    "bootstrap_servers": "use the option 'kafka.bootstrap.servers'",
}

# kafka-python settings whose values are Python objects, not strings.
_NOT_SETTABLE = {
    "default_offset_commit_callback",
    "partition_assignment_strategy",
    "selector",
    "kafka_client",
    "ssl_context",
    "metric_reporters",
    "sasl_oauth_token_provider",
    "socket_options",
}

# librdkafka-style names with a different kafka-python spelling.
_KAFKA_ALIASES = {
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}

# Settings whose kafka-python default is None but whose values are not strings.
_NONE_DEFAULT_TYPES: dict[str, type] = {
    "api_version": tuple,
    "receive_buffer_bytes": int,
    "send_buffer_bytes": int,
}


def consumer_settings(opts: Options) -> dict[str, Any]:
    """``kafka.*`` options (but ``kafka.bootstrap.servers``) as ``KafkaConsumer`` arguments."""
    from kafka import KafkaConsumer

    where = opts.where
    defaults: Mapping[str, Any] = KafkaConsumer.DEFAULT_CONFIG
    config: dict[str, Any] = {}
    unknown: list[str] = []
    for name, value in sorted(opts.with_prefix("kafka.").items()):
        if name == "bootstrap.servers":
            continue
        option = f"kafka.{name}"
        arg = _KAFKA_ALIASES.get(name, name.replace(".", "_").replace("-", "_"))
        if arg in REFUSED_KAFKA:
            raise ConfigError(option, value, f"not to be set: {REFUSED_KAFKA[arg]}", where=where)
        if arg not in defaults:
            unknown.append(option)
            continue
        if arg in _NOT_SETTABLE:
            raise ConfigError(
                option,
                value,
                f"not to be set: kafka-python's {arg} takes a Python object",
                where=where,
            )
        config[arg] = _kafka_value(option, arg, value, defaults[arg], where)
    if unknown:
        known = sorted(
            "kafka." + k.replace("_", ".")
            for k in defaults
            if k not in REFUSED_KAFKA and k not in _NOT_SETTABLE
        )
        raise UnknownOptionError(unknown, known, where=f"{where} (kafka-python consumer settings)")
    return config


def _kafka_value(option: str, arg: str, value: str, default: Any, where: str) -> Any:
    kind = _NONE_DEFAULT_TYPES.get(arg) if default is None else type(default)
    text = value.strip()
    if kind is bool:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ConfigError(option, value, "true or false", where=where)
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(option, value, "an integer", where=where) from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(option, value, "a number", where=where) from None
    if kind is tuple:
        try:
            return tuple(int(p) for p in text.split("."))
        except ValueError:
            raise ConfigError(
                option, value, "a broker version such as 2.8.0", where=where
            ) from None
    return text
