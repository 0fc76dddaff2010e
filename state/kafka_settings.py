"""Kafka client settings: ``<prefix>*`` options as kafka-python arguments, for every Kafka
client gtbarrier makes.

The source's consumers take ``kafka.*`` (:mod:`datasource.kafka_settings`), the kafka
consumer's producer and its readers ``consumer.kafka.*`` and the dead-letter topic's
producer ``errors.deadLetter.kafka.*`` (:mod:`sink.consumers.kafka.kafka_options`). Each
layers its own refusals on :func:`kafka_arguments`, the one conversion:

* **Names.** A setting's name under the prefix with dots (and dashes) turned into
  underscores (``security.protocol`` -> ``security_protocol``), or a librdkafka name of
  :data:`ALIASES` (``ssl.ca.location`` -> ``ssl_cafile``), must be an argument of the
  client class (its ``DEFAULT_CONFIG``); settings that take Python objects
  (:data:`NOT_SETTABLE`) and those the caller refuses are refused with the reason. Unknown
  settings are named with the prefix, never with their values (a misspelt password setting
  would otherwise show the password).
* **Java-only settings** pasted from a Spark job are refused with what to use instead, and
  ``ssl.endpoint.identification.algorithm`` is mapped to kafka-python's
  ``ssl_check_hostname`` (:mod:`state.kafka_java_settings`).
* **Types.** A value takes the type of the argument's default (``ssl.check.hostname=false``
  is ``False``, not the truthy string ``"false"``).
* **TLS and SASL** (:func:`check_security`): ``security.protocol`` is one of
  :data:`SECURITY_PROTOCOLS`; ``sasl.*`` settings need a SASL protocol and ``ssl.*`` ones
  an SSL protocol (else kafka-python would ignore them and connect without); a SASL
  protocol needs ``sasl.mechanism``, and PLAIN or SCRAM a user name and password, given as
  ``sasl.plain.username``/``...password`` or, as Spark's Kafka source takes them, in
  ``sasl.jaas.config``.
* **Secrets.** Values of :data:`SECRET_ARGS` are
  :class:`~state.kafka_redaction.Secret` strings, whose ``repr`` (options, settings, pool
  keys, error messages) is a fingerprint, never the text. A value may be a secret
  reference (``${env:NAME}``, ``${file:/path}``, ``${file:/path:key}``,
  :mod:`state.secrets`): the conversion keeps the reference (parsed options are planned,
  checkpointed and pickled to tasks), and :func:`resolve_secrets` turns it into the secret
  where a client is made. kafka-python 3 logs every request it sends at DEBUG, a SASL
  PLAIN authentication's password among them, and the bytes on the wire: every secret
  :func:`resolve_secrets` hands a client is taken out of kafka-python's log records
  (:data:`~state.kafka_redaction.REDACT`), shown as its fingerprint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from state.errors import ConfigError, UnknownOptionError
from state.kafka_java_settings import ENDPOINT_IDENTIFICATION, check_hostname, refuse_java_only
from state.kafka_oauth import (
    AWS_REGION,
    MSK_IAM,
    MSK_IAM_PROVIDER,
    REGION_ARG,
    TOKEN_PROVIDER,
    check_reference,
    check_region,
    check_signer,
)
from state.kafka_redaction import REDACT, Secret
from state.secrets import has_reference, resolve

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# What kafka-python 3 implements.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
SECRET_ARGS = frozenset({"sasl_plain_password", "ssl_password"})
"""kafka-python arguments whose values are secrets: never shown."""
JAAS_SETTING = "sasl.jaas.config"
"""Not a kafka-python argument: read for its user name and password (a secret as a whole)."""

# The login modules a jaas.config may name, and the mechanisms each serves.
_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+required\s*(?P<pairs>.*?)\s*;?\s*", re.DOTALL)
_JAAS_PAIR = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

# Login modules of a jaas.config that kafka-python serves otherwise, and how.
_JAAS_ELSEWHERE = {
    "com.sun.security.auth.module.Krb5LoginModule": "for GSSAPI, no jaas.config: a Kerberos "
    "ticket from kinit (or KRB5CCNAME) and {p}sasl.kerberos.service.name "
    "(the gssapi package installed)",
}

NOT_SETTABLE = frozenset(
    {
        "default_offset_commit_callback",
        "partition_assignment_strategy",
        "partitioner",
        "selector",
        "kafka_client",
        "ssl_context",
        "metric_reporters",
        "socket_options",
    }
)
"""kafka-python arguments whose values are Python objects, not strings."""

ALIASES = {
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}
"""librdkafka-style names with another kafka-python spelling."""

# Arguments whose kafka-python default does not say their type: None, or the producer's
# retries=inf (a float) where a count of retries is an int.
_TYPES: dict[str, type] = {
    "api_version": tuple,
    "receive_buffer_bytes": int,
    "send_buffer_bytes": int,
    "retries": int,
}


def argument_name(name: str) -> str:
    """The kafka-python argument a setting stands for (``name``: under the prefix,
    lower-cased): its alias (:data:`ALIASES`), else dots and dashes as underscores."""
    return ALIASES.get(name, name.replace(".", "_").replace("-", "_"))


def is_secret(name: str) -> bool:
    """Whether the setting ``name`` (under the prefix, lower-cased) holds a secret: a
    password of :data:`SECRET_ARGS`, or ``sasl.jaas.config``, which holds one."""
    return name == JAAS_SETTING or argument_name(name) in SECRET_ARGS


def option_name(prefix: str, arg: str) -> str:
    """The option of the kafka-python argument ``arg`` under ``prefix``, as messages name it."""
    return prefix + arg.replace("_", ".")


def kafka_arguments(  # noqa: PLR0913 - keyword-only, each named at the call
    settings: Mapping[str, str],
    *,
    prefix: str,
    defaults: Mapping[str, Any],
    client: str,
    where: str,
    refused: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``settings`` (names under ``prefix``, lower-cased, the prefix removed) as arguments of
    the kafka-python client whose ``DEFAULT_CONFIG`` is ``defaults``.

    ``client`` (``consumer``, ``producer``) names the client in the unknown-setting error;
    ``refused`` maps arguments the caller owns to why (``not to be set: <why>``). Values are
    typed, secrets are :class:`Secret`, secret references are kept, ``sasl.jaas.config`` is
    read for its user name and password, and the TLS and SASL settings are checked together
    (:func:`check_security`). Raises :class:`ConfigError` naming ``<prefix><name>``, or
    :class:`UnknownOptionError` naming every unknown setting (never a value).
    """
    owned = refused or {}
    config: dict[str, Any] = {}
    unknown: list[str] = []
    jaas: str | None = None
    endpoint: str | None = None
    region: str | None = None
    for name, value in sorted(settings.items()):
        if name == JAAS_SETTING:
            jaas = value
            continue
        option = prefix + name
        refuse_java_only(name, value, prefix, where)
        if name == ENDPOINT_IDENTIFICATION:
            endpoint = value
            continue
        if name == AWS_REGION:
            region = check_region(option, value, where)
            continue
        arg = argument_name(name)
        if arg in owned:
            raise ConfigError(option, value, f"not to be set: {owned[arg]}", where=where)
        if arg not in defaults:
            unknown.append(option)
            continue
        if arg in NOT_SETTABLE:
            raise ConfigError(
                option,
                value,
                f"not to be set: kafka-python's {arg} takes a Python object",
                where=where,
            )
        config[arg] = _converted(option, arg, value, defaults[arg], where)
    if unknown:
        known = sorted(
            option_name(prefix, k) for k in defaults if k not in owned and k not in NOT_SETTABLE
        )
        raise UnknownOptionError(unknown, known, where=f"{where} (kafka-python {client} settings)")
    if endpoint is not None:
        config["ssl_check_hostname"] = check_hostname(endpoint, config, where, prefix)
    if jaas is not None:
        config.update(_from_jaas(jaas, config, where, prefix))
    config.update(_msk_iam(config, region, where, prefix))
    check_security(config, where, prefix)
    return config


def _converted(option: str, arg: str, value: str, default: Any, where: str) -> Any:
    """The value of the kafka-python argument ``arg`` for the setting ``option``."""
    if arg in SECRET_ARGS:
        return Secret(value)  # as given: a password may begin or end with a space
    if option.endswith(TOKEN_PROVIDER):
        # the reference only: the provider is made where each client is made
        return check_reference(option, value, where)
    if arg in ("security_protocol", "sasl_mechanism"):
        return value.strip().upper()  # kafka-python compares them in upper case
    return _typed(option, arg, value, default, where)


def _msk_iam(
    config: Mapping[str, Any], region: str | None, where: str, prefix: str
) -> dict[str, Any]:
    """``sasl.mechanism=AWS_MSK_IAM`` as OAUTHBEARER with the built-in provider of
    :mod:`state.kafka_oauth` (and its region, if given): the arguments to add."""
    if config.get("sasl_mechanism") != MSK_IAM:
        if region is not None:
            raise ConfigError(
                prefix + AWS_REGION,
                region,
                f"to be set only with {prefix}sasl.mechanism={MSK_IAM} (the region of the "
                "MSK cluster its tokens are signed for)",
                where=where,
            )
        return {}
    check_signer(prefix + "sasl.mechanism", where)
    if "sasl_oauth_token_provider" in config:
        raise ConfigError(
            prefix + TOKEN_PROVIDER,
            config["sasl_oauth_token_provider"],
            f"not to be set: {MSK_IAM} brings its own token provider (leave "
            f"{prefix}{TOKEN_PROVIDER} out, or use {prefix}sasl.mechanism=OAUTHBEARER with it)",
            where=where,
        )
    added: dict[str, Any] = {
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": MSK_IAM_PROVIDER,
    }
    if region is not None:
        added[REGION_ARG] = region
    return added


def check_security(config: Mapping[str, Any], where: str, prefix: str = "kafka.") -> None:
    """The TLS and SASL settings of ``config`` (kafka-python arguments) make sense
    together; :class:`ConfigError` names the option under ``prefix`` and what was expected."""
    protocol = config.get("security_protocol", "PLAINTEXT")
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            prefix + "security.protocol",
            protocol,
            "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            where=where,
        )
    given = [k for k in config if k.startswith(("sasl_", "ssl_"))]
    sasl = sorted(option_name(prefix, k) for k in given if k.startswith("sasl_"))
    ssl = sorted(option_name(prefix, k) for k in given if k.startswith("ssl_"))
    if sasl and not protocol.startswith("SASL_"):
        raise ConfigError(
            prefix + "security.protocol",
            protocol,
            f"SASL_SSL or SASL_PLAINTEXT, as {', '.join(sasl)} is given (with {protocol} the "
            "client would ignore it and connect without authenticating)",
            where=where,
        )
    if ssl and protocol not in ("SSL", "SASL_SSL"):
        raise ConfigError(
            prefix + "security.protocol",
            protocol,
            f"SSL or SASL_SSL, as {', '.join(ssl)} is given (with {protocol} the client "
            "would ignore it and connect without TLS)",
            where=where,
        )
    mechanism = config.get("sasl_mechanism")
    mechanisms = " or ".join((*SASL_MECHANISMS, MSK_IAM))
    if mechanism is not None and mechanism not in SASL_MECHANISMS:
        raise ConfigError(prefix + "sasl.mechanism", mechanism, mechanisms, where=where)
    if not protocol.startswith("SASL_"):
        return
    if mechanism is None:
        raise ConfigError(
            prefix + "sasl.mechanism",
            None,
            f"a SASL mechanism for security.protocol {protocol}: {mechanisms}",
            where=where,
        )
    provider = config.get("sasl_oauth_token_provider")
    if provider is not None and mechanism != "OAUTHBEARER":
        raise ConfigError(
            prefix + TOKEN_PROVIDER,
            provider,
            f"to be set only with {prefix}sasl.mechanism=OAUTHBEARER (the mechanism is "
            f"{mechanism})",
            where=where,
        )
    if provider is None and mechanism == "OAUTHBEARER":
        raise ConfigError(
            prefix + TOKEN_PROVIDER,
            None,
            "module:callable for SASL OAUTHBEARER: a callable that returns a token string or "
            f"a kafka-python AbstractTokenProvider (or {prefix}sasl.mechanism={MSK_IAM} for "
            "AWS MSK IAM)",
            where=where,
        )
    if mechanism == "PLAIN" or mechanism.startswith("SCRAM-"):
        for arg in ("sasl_plain_username", "sasl_plain_password"):
            if not config.get(arg):
                raise ConfigError(
                    option_name(prefix, arg),
                    None,
                    f"a {arg.rsplit('_', 1)[1]} for SASL {mechanism} (or {prefix}{JAAS_SETTING})",
                    where=where,
                )


def _from_jaas(text: str, config: Mapping[str, Any], where: str, prefix: str) -> dict[str, Any]:
    """The user name and password of a PLAIN or SCRAM ``sasl.jaas.config``, as Spark's
    Kafka source takes them. The value is a secret: errors show its fingerprint only."""
    option = prefix + JAAS_SETTING
    shown = Secret(text)
    found = _JAAS.fullmatch(text)
    modules = " or ".join(_JAAS_MODULES)
    if found is not None and found.group("module") in _JAAS_ELSEWHERE:
        raise ConfigError(
            option,
            shown,
            _JAAS_ELSEWHERE[found.group("module")].format(p=prefix),
            where=where,
        )
    if found is None or found.group("module") not in _JAAS_MODULES:
        raise ConfigError(
            option, shown, f'\'<{modules}> required username="..." password="...";\'', where=where
        )
    pairs = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_PAIR.findall(found.group("pairs"))}
    if "username" not in pairs or "password" not in pairs:
        raise ConfigError(
            option, shown, 'username="..." and password="..." (both quoted)', where=where
        )
    if "sasl_plain_username" in config or "sasl_plain_password" in config:
        raise ConfigError(
            option,
            shown,
            f"the user name and password in {option} or in "
            f"{prefix}sasl.plain.username/password, not both",
            where=where,
        )
    mechanism = config.get("sasl_mechanism")
    serves = _JAAS_MODULES[found.group("module")]
    if mechanism is not None and mechanism not in serves:
        raise ConfigError(
            option, shown, f"a login module for {prefix}sasl.mechanism {mechanism}", where=where
        )
    return {
        "sasl_plain_username": pairs["username"],
        "sasl_plain_password": Secret(pairs["password"]),
    }


def resolve_secrets(
    settings: Mapping[str, Any], where: str, prefix: str = "kafka."
) -> dict[str, Any]:
    """``settings`` (kafka-python arguments) with every secret reference resolved
    (:mod:`state.secrets`), as a new dict: called where a client is made, on the driver or
    in an executor's task. Secret settings come back as
    :class:`~state.kafka_redaction.Secret`, and kafka-python's log records of this process
    never show them (:data:`~state.kafka_redaction.REDACT`); an unresolvable reference is a
    :class:`~state.errors.SecretReferenceError` naming the option under ``prefix`` and the
    reference, never a value."""
    out: dict[str, Any] = {}
    for arg, given in settings.items():
        if arg == REGION_ARG:
            continue  # the MSK IAM provider's, never a kafka-python argument
        if arg == "sasl_oauth_token_provider" and isinstance(given, str):
            # here a client is made, so kafka-python is loaded anyway
            from state.kafka_token_providers import token_provider

            out[arg] = token_provider(
                given,
                option=option_name(prefix, arg),
                where=where,
                region=settings.get(REGION_ARG),
            )
            continue
        value = given
        if isinstance(given, str) and has_reference(given):
            value = resolve(given, option=option_name(prefix, arg), where=where)
        if arg in SECRET_ARGS and isinstance(value, str):
            value = Secret(value)
            REDACT.add(value)
        out[arg] = value
    return out


def _typed(option: str, arg: str, value: str, default: Any, where: str) -> Any:
    """``value`` as the type of ``arg``'s default (:data:`_TYPES` where it does not say)."""
    kind = _TYPES.get(arg, type(default))
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
