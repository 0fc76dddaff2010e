"""``kafka.*`` options of ``gtkafka`` as kafka-python ``KafkaConsumer`` arguments.

The Kafka name with dots turned into underscores (``kafka.security.protocol`` ->
``security_protocol``) must be one of ``KafkaConsumer.DEFAULT_CONFIG``; values are
converted to the type of its default. Settings that would break replayable reads are
refused with the reason.

TLS and SASL (:func:`check_security`): ``kafka.security.protocol`` is one of
:data:`SECURITY_PROTOCOLS`; ``kafka.sasl.*`` settings need a SASL protocol and
``kafka.ssl.*`` settings an SSL one (else kafka-python would ignore them and connect
without); a SASL protocol needs ``kafka.sasl.mechanism``, and PLAIN or SCRAM a user name
and password, given as ``kafka.sasl.plain.username``/``...password`` or, as Spark's Kafka
source takes them, in ``kafka.sasl.jaas.config``. Secret values (:data:`SECRET_ARGS`)
are :class:`Secret` strings, whose ``repr`` (options, configs, pool keys, error
messages) shows a fingerprint, never the text. A value may be a secret reference
(``${env:NAME}``, ``${file:/path}``, :mod:`state.secrets`): the options keep the
reference, and :func:`resolve_secrets` turns it into the secret where a client is made.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from typing import Any

from state.errors import ConfigError, UnknownOptionError
from state.options import Options
from state.secrets import has_reference, resolve

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# What kafka-python 3 implements.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
# Settings whose values are secrets: never shown.
SECRET_ARGS = frozenset({"sasl_plain_password", "ssl_password"})
JAAS_OPTION = "kafka.sasl.jaas.config"
# The login modules a jaas.config may name, and the mechanisms each serves.
_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+required\s*(?P<pairs>.*?)\s*;?\s*$", re.DOTALL)
_JAAS_PAIR = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
# A key for fingerprints that lives as long as the process: a fingerprint tells two
# secrets apart within a process (pool keys) and says nothing outside it.
_FINGERPRINT_KEY = secrets.token_bytes(16)


class Secret(str):
    """A secret setting's text. Clients get the text; ``repr`` shows a fingerprint only."""

    __slots__ = ()

    def __repr__(self) -> str:
        digest = hmac.new(_FINGERPRINT_KEY, self.encode(), hashlib.sha256).hexdigest()
        return f"<secret {digest[:12]}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (str.__str__(self),))


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
    jaas: str | None = None
    for name, value in sorted(opts.with_prefix("kafka.").items()):
        if name == "bootstrap.servers":
            continue
        if name == "sasl.jaas.config":
            jaas = value
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
        if arg in SECRET_ARGS:
            config[arg] = Secret(value)  # as given: a password may begin or end with a space
        elif arg in ("security_protocol", "sasl_mechanism"):
            config[arg] = value.strip().upper()  # kafka-python compares them in upper case
        else:
            config[arg] = _kafka_value(option, arg, value, defaults[arg], where)
    if unknown:
        known = sorted(
            "kafka." + k.replace("_", ".")
            for k in defaults
            if k not in REFUSED_KAFKA and k not in _NOT_SETTABLE
        )
        raise UnknownOptionError(unknown, known, where=f"{where} (kafka-python consumer settings)")
    if jaas is not None:
        config.update(_from_jaas(jaas, config, where))
    check_security(config, where)
    return config


def check_security(config: Mapping[str, Any], where: str) -> None:
    """The TLS and SASL settings of ``config`` (kafka-python arguments) make sense
    together; :class:`ConfigError` names the option and what was expected."""
    protocol = config.get("security_protocol", "PLAINTEXT")
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            "kafka.security.protocol",
            protocol,
            "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            where=where,
        )
    given = [k for k in config if k.startswith(("sasl_", "ssl_"))]
    sasl = sorted("kafka." + k.replace("_", ".") for k in given if k.startswith("sasl_"))
    ssl = sorted("kafka." + k.replace("_", ".") for k in given if k.startswith("ssl_"))
    if sasl and not protocol.startswith("SASL_"):
        raise ConfigError(
            "kafka.security.protocol",
            protocol,
            f"SASL_SSL or SASL_PLAINTEXT, as {', '.join(sasl)} is given (with {protocol} the "
            "client would ignore it and connect without authenticating)",
            where=where,
        )
    if ssl and protocol not in ("SSL", "SASL_SSL"):
        raise ConfigError(
            "kafka.security.protocol",
            protocol,
            f"SSL or SASL_SSL, as {', '.join(ssl)} is given (with {protocol} the client "
            "would ignore it and connect without TLS)",
            where=where,
        )
    mechanism = config.get("sasl_mechanism")
    if mechanism is not None and mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            "kafka.sasl.mechanism", mechanism, " or ".join(SASL_MECHANISMS), where=where
        )
    if not protocol.startswith("SASL_"):
        return
    if mechanism is None:
        raise ConfigError(
            "kafka.sasl.mechanism",
            None,
            f"a SASL mechanism for security.protocol {protocol}: {' or '.join(SASL_MECHANISMS)}",
            where=where,
        )
    if mechanism == "PLAIN" or mechanism.startswith("SCRAM-"):
        for arg in ("sasl_plain_username", "sasl_plain_password"):
            if not config.get(arg):
                raise ConfigError(
                    "kafka." + arg.replace("_", "."),
                    None,
                    f"a {arg.rsplit('_', 1)[1]} for SASL {mechanism} (or {JAAS_OPTION})",
                    where=where,
                )


def _from_jaas(text: str, config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The user name and password of a PLAIN or SCRAM ``sasl.jaas.config``, as Spark's
    Kafka source takes them. The value is a secret: errors show its fingerprint only."""
    shown = Secret(text)
    found = _JAAS.match(text)
    modules = " or ".join(_JAAS_MODULES)
    if found is None or found.group("module") not in _JAAS_MODULES:
        raise ConfigError(
            JAAS_OPTION,
            shown,
            f'\'<{modules}> required username="..." password="...";\'',
            where=where,
        )
    pairs = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_PAIR.findall(found.group("pairs"))}
    if "username" not in pairs or "password" not in pairs:
        raise ConfigError(
            JAAS_OPTION, shown, 'username="..." and password="..." (both quoted)', where=where
        )
    if "sasl_plain_username" in config or "sasl_plain_password" in config:
        raise ConfigError(
            JAAS_OPTION,
            shown,
            "the user name and password in kafka.sasl.jaas.config or in "
            "kafka.sasl.plain.username/password, not both",
            where=where,
        )
    mechanism = config.get("sasl_mechanism")
    serves = _JAAS_MODULES[found.group("module")]
    if mechanism is not None and mechanism not in serves:
        raise ConfigError(
            JAAS_OPTION, shown, f"a login module for kafka.sasl.mechanism {mechanism}", where=where
        )
    return {
        "sasl_plain_username": pairs["username"],
        "sasl_plain_password": Secret(pairs["password"]),
    }


def resolve_secrets(settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``settings`` with every secret reference resolved (:mod:`state.secrets`): called
    where a client is made, on the driver or in an executor's task. Secret settings come
    back as :class:`Secret`."""
    out: dict[str, Any] = {}
    for arg, given in settings.items():
        value = given
        if isinstance(given, str) and has_reference(given):
            value = resolve(given, option="kafka." + arg.replace("_", "."), where=where)
        out[arg] = Secret(value) if arg in SECRET_ARGS and isinstance(value, str) else value
    return out


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
