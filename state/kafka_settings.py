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
* **Java-only settings** (:data:`JAVA_ONLY`), pasted from a Spark job: a JKS truststore or
  keystore, Java's TLS engine, Java classes. Each is refused with what to use instead
  (:func:`java_only_hint`: for a JKS store, the commands that convert it to PEM).
  ``ssl.endpoint.identification.algorithm`` is kafka-python's ``ssl_check_hostname``:
  ``https`` checks the host name (the default), empty turns the check off.
* **Types.** A value takes the type of the argument's default (``ssl.check.hostname=false``
  is ``False``, not the truthy string ``"false"``).
* **TLS and SASL** (:func:`check_security`): ``security.protocol`` is one of
  :data:`SECURITY_PROTOCOLS`; ``sasl.*`` settings need a SASL protocol and ``ssl.*`` ones
  an SSL protocol (else kafka-python would ignore them and connect without); a SASL
  protocol needs ``sasl.mechanism``, and PLAIN or SCRAM a user name and password, given as
  ``sasl.plain.username``/``...password`` or, as Spark's Kafka source takes them, in
  ``sasl.jaas.config``.
* **Secrets.** Values of :data:`SECRET_ARGS` are :class:`Secret` strings, whose ``repr``
  (options, settings, pool keys, error messages) is a fingerprint, never the text. A value
  may be a secret reference (``${env:NAME}``, ``${file:/path}``, ``${file:/path:key}``,
  :mod:`state.secrets`): the conversion keeps the reference (parsed options are planned,
  checkpointed and pickled to tasks), and :func:`resolve_secrets` turns it into the secret
  where a client is made. kafka-python 3 logs every request it sends at DEBUG, a SASL
  PLAIN authentication's password among them, and the bytes on the wire: every secret
  :func:`resolve_secrets` hands a client is taken out of kafka-python's log records
  (:class:`RedactSecrets`), shown as its fingerprint.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import threading
from collections.abc import Mapping
from typing import Any

from state.errors import ConfigError, UnknownOptionError
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
# A key for fingerprints that lives as long as the process: a fingerprint tells two
# secrets apart within a process (pool keys) and says nothing outside it.
_FINGERPRINT_KEY = secrets.token_bytes(16)

ENDPOINT_IDENTIFICATION = "ssl.endpoint.identification.algorithm"
"""Java's switch of the host name check: ``https`` (on) or empty (off), kafka-python's
``ssl_check_hostname``."""

_TRUSTSTORE = (
    "use PEM CA certificates in {p}ssl.cafile (kafka-python reads no Java key store): "
    "convert the JKS or PKCS12 truststore, one certificate with "
    "`keytool -exportcert -rfc -keystore truststore.jks -storepass <password> -alias <alias> "
    "-file ca.pem`, or every one with "
    "`keytool -importkeystore -srckeystore truststore.jks -srcstorepass <password> "
    "-destkeystore truststore.p12 -deststoretype PKCS12 -deststorepass <password>` then "
    "`openssl pkcs12 -in truststore.p12 -passin pass:<password> -nokeys -out ca.pem`, "
    "and set {p}ssl.cafile=/path/ca.pem (a PEM file needs no password)"
)
_KEYSTORE = (
    "use the client certificate and key as PEM in {p}ssl.certfile and {p}ssl.keyfile, the key's "
    "passphrase in {p}ssl.password (kafka-python reads no Java key store): convert the "
    "keystore with `keytool -importkeystore -srckeystore keystore.jks -srcstorepass <password> "
    "-destkeystore keystore.p12 -deststoretype PKCS12 -deststorepass <password>`, then "
    "`openssl pkcs12 -in keystore.p12 -passin pass:<password> -clcerts -nokeys -out client.pem` "
    "and `openssl pkcs12 -in keystore.p12 -passin pass:<password> -nocerts "
    "-passout pass:<password> -out client.key`"
)
_PEM_FILES = (
    "use PEM in files: CA certificates in {p}ssl.cafile, the client certificate in "
    "{p}ssl.certfile and its key in {p}ssl.keyfile"
)
_JAVA_TLS = (
    "leave it out: it configures Java's TLS engine, which Python's ssl module replaces "
    "(it negotiates the highest TLS version both ends support)"
)
_JAVA_CLASS = (
    "leave it out: it names a Java class (SASL PLAIN and SCRAM take "
    "{p}sasl.plain.username and {p}sasl.plain.password, GSSAPI a Kerberos ticket from kinit "
    "and {p}sasl.kerberos.service.name)"
)
JAVA_ONLY: dict[str, str] = {
    "ssl.truststore.location": _TRUSTSTORE,
    "ssl.truststore.password": _TRUSTSTORE,
    "ssl.truststore.type": _TRUSTSTORE,
    "ssl.truststore.certificates": _PEM_FILES,
    "ssl.keystore.location": _KEYSTORE,
    "ssl.keystore.password": _KEYSTORE,
    "ssl.keystore.type": _KEYSTORE,
    "ssl.keystore.key": _PEM_FILES,
    "ssl.keystore.certificate.chain": _PEM_FILES,
    "ssl.protocol": _JAVA_TLS,
    "ssl.enabled.protocols": _JAVA_TLS,
    "ssl.provider": _JAVA_TLS,
    "ssl.keymanager.algorithm": _JAVA_TLS,
    "ssl.trustmanager.algorithm": _JAVA_TLS,
    "ssl.secure.random.implementation": _JAVA_TLS,
    "ssl.engine.factory.class": _JAVA_TLS,
    "ssl.cipher.suites": "use an OpenSSL cipher list in {p}ssl.ciphers "
    "(e.g. ECDHE+AESGCM; OpenSSL names the suites otherwise than Java)",
    "interceptor.classes": "leave it out: interceptors are Java classes that run inside "
    "Java's client (transform the rows in Spark)",
    "sasl.login.class": _JAVA_CLASS,
    "sasl.login.callback.handler.class": _JAVA_CLASS,
    "sasl.client.callback.handler.class": _JAVA_CLASS,
}
"""Settings of Java's Kafka client that users paste from Spark jobs, with what to use
instead (``{p}``: the prefix of the client's options); see :func:`java_only_hint`."""

# Login modules of a jaas.config that kafka-python serves otherwise, and how.
_JAAS_ELSEWHERE = {
    "com.sun.security.auth.module.Krb5LoginModule": "for GSSAPI, no jaas.config: a Kerberos "
    "ticket from kinit (or KRB5CCNAME) and {p}sasl.kerberos.service.name "
    "(the gssapi package installed)",
}


def java_only_hint(prefix: str, name: str) -> str:
    """What to use instead of the Java-only setting ``name`` (under ``prefix``, lower-cased,
    a key of :data:`JAVA_ONLY`), with the options named under ``prefix``."""
    hint = JAVA_ONLY[name].format(p=prefix)
    return f"not to be set: it is a setting of Java's Kafka client; {hint}"


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

# kafka-python's loggers that log what goes on the wire: each request (connection), the
# bytes (parser). Every other logger of the kafka package present when a secret is
# resolved gets the filter too.
_WIRE_LOGGERS = ("kafka.net.connection", "kafka.protocol.parser")

# Arguments whose kafka-python default does not say their type: None, or the producer's
# retries=inf (a float) where a count of retries is an int.
_TYPES: dict[str, type] = {
    "api_version": tuple,
    "receive_buffer_bytes": int,
    "send_buffer_bytes": int,
    "retries": int,
}


class Secret(str):
    """A secret setting's text. Clients get the text; ``repr`` shows a fingerprint only."""

    __slots__ = ()

    def __repr__(self) -> str:
        digest = hmac.new(_FINGERPRINT_KEY, self.encode(), hashlib.sha256).hexdigest()
        return f"<secret {digest[:12]}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (str.__str__(self),))


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
        _refuse_java_only(name, value, prefix, where)
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
        config["ssl_check_hostname"] = _check_hostname(endpoint, config, where, prefix)
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


def _refuse_java_only(name: str, value: str, prefix: str, where: str) -> None:
    """:class:`ConfigError` with what to use instead if ``name`` is a Java-only setting
    (a password or a key shown as its fingerprint only)."""
    if name in JAVA_ONLY:
        shown = Secret(value) if "password" in name or name.endswith(".key") else value
        raise ConfigError(prefix + name, shown, java_only_hint(prefix, name), where=where)


def _check_hostname(value: str, config: Mapping[str, Any], where: str, prefix: str) -> bool:
    """``ssl.endpoint.identification.algorithm`` as kafka-python's ``ssl_check_hostname``:
    ``https`` is the check (its default), empty is none (as Java's client reads them)."""
    option = prefix + ENDPOINT_IDENTIFICATION
    algorithm = value.strip().lower()
    if algorithm not in ("", "https"):
        raise ConfigError(
            option,
            value,
            f"'https' (check the broker's host name, the default) or empty (no check), as "
            f"{prefix}ssl.check.hostname=true or false",
            where=where,
        )
    check = algorithm == "https"
    if config.get("ssl_check_hostname", check) != check:
        raise ConfigError(
            option,
            value,
            f"{option} or {prefix}ssl.check.hostname, not both (they disagree)",
            where=where,
        )
    return check


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
    in an executor's task. Secret settings come back as :class:`Secret`, and kafka-python's
    log records of this process never show them (:class:`RedactSecrets`); an unresolvable
    reference is a :class:`~state.errors.SecretReferenceError` naming the option under
    ``prefix`` and the reference, never a value."""
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


class RedactSecrets(logging.Filter):
    """Takes the secrets given to it (:meth:`add`) out of the log records of the loggers it
    is installed on: each is replaced by its fingerprint (``<secret 1f3a...>``), as text
    and as a ``bytes`` repr shows it (quotes and backslashes escaped, UTF-8 as ``\\x..``).

    Installed on kafka-python's loggers when a Kafka client is given a secret: at DEBUG it
    logs each request (a SASL PLAIN authentication holds the password) and the bytes it
    sends. A record is only formatted here when its logger is enabled for its level, so
    the filter costs nothing at INFO.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        # (form as it may appear, replacement); replaced whole, never changed in place:
        # kafka-python's IO threads read it while a client of another thread adds one
        self._forms: tuple[tuple[str, str], ...] = ()
        self._secrets: tuple[str, ...] = ()

    def add(self, secret: str) -> None:
        """Redact ``secret`` from now on (an empty one is nothing to hide), and make sure the
        filter is on every kafka-python logger."""
        if not secret:
            return
        text = str.__str__(secret)
        with self._lock:
            if text not in self._secrets:
                # every secret given, never forgotten: a client made with one may log it
                # for as long as it lives (the reasons in state.secrets, "no secret is
                # ever forgotten")
                kept = (*self._secrets, text)
                self._secrets = kept
                self._forms = tuple(
                    (form, repr(Secret(s)))
                    for s in sorted(kept, key=len, reverse=True)  # a longer one first
                    for form in _shown_forms(s)
                )
        self.install()

    def install(self) -> None:
        """Put the filter on kafka-python's wire loggers and on every other logger of the
        ``kafka`` package that exists (loggers are made when their modules are imported)."""
        names = {
            name
            for name, logger in list(logging.root.manager.loggerDict.items())
            if (name == "kafka" or name.startswith("kafka.")) and isinstance(logger, logging.Logger)
        }
        for name in names.union(_WIRE_LOGGERS):
            logger = logging.getLogger(name)
            if self not in logger.filters:
                logger.addFilter(self)

    def redact(self, text: str) -> str:
        """``text`` with every secret given replaced by its fingerprint."""
        for form, shown in self._forms:
            if form in text:
                text = text.replace(form, shown)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._forms:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: the handler reports it when it formats it
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def _shown_forms(secret: str) -> set[str]:
    """How ``secret`` may appear in a log line: as text, in a ``str`` repr, and in a
    ``bytes``/``bytearray`` repr quoted either way (its UTF-8 bytes)."""
    raw = secret.encode()
    forms = {
        secret,
        repr(secret)[1:-1],
        repr(raw)[2:-1],
        # with both quote characters about, a repr quotes with ' and escapes it
        repr(b"'\"" + raw)[5:-1],
    }
    return {form for form in forms if form}


REDACT = RedactSecrets()
"""The one filter of the process: every secret a Kafka client was given."""


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
