"""Settings of Java's Kafka client pasted from a Spark job, for every Kafka client alike.

kafka-python is not Java's client: a JKS truststore or keystore, Java's TLS engine and Java
classes (:data:`JAVA_ONLY`) mean nothing to it. Each is refused with what to use instead
(:func:`refuse_java_only`, :func:`java_only_hint`: for a JKS store, the commands that
convert it to PEM), so that a setting pasted from a Spark job is not merely an unknown
one. ``ssl.endpoint.identification.algorithm`` has a kafka-python equivalent and is
mapped to it (:func:`check_hostname`): ``https`` checks the host name (the default), empty
turns the check off. :func:`~state.kafka_settings.kafka_arguments` applies both to every
setting under a client's prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from state.errors import ConfigError
from state.kafka_redaction import Secret

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


def java_only_hint(prefix: str, name: str) -> str:
    """What to use instead of the Java-only setting ``name`` (under ``prefix``, lower-cased,
    a key of :data:`JAVA_ONLY`), with the options named under ``prefix``."""
    hint = JAVA_ONLY[name].format(p=prefix)
    return f"not to be set: it is a setting of Java's Kafka client; {hint}"


def refuse_java_only(name: str, value: str, prefix: str, where: str) -> None:
    """:class:`ConfigError` with what to use instead if ``name`` is a Java-only setting
    (a password or a key shown as its fingerprint only)."""
    if name in JAVA_ONLY:
        shown = Secret(value) if "password" in name or name.endswith(".key") else value
        raise ConfigError(prefix + name, shown, java_only_hint(prefix, name), where=where)


def check_hostname(value: str, config: Mapping[str, Any], where: str, prefix: str) -> bool:
    """``ssl.endpoint.identification.algorithm`` as kafka-python's ``ssl_check_hostname``:
    ``https`` is the check (its default), empty is none (as Java's client reads them).
    :class:`ConfigError` for any other value, or one that disagrees with the
    ``ssl_check_hostname`` already in ``config``."""
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
