"""SASL OAUTHBEARER token providers for every Kafka client gtbarrier makes, named by
reference, and the built-in one of AWS MSK IAM.

* **By reference.** ``<prefix>sasl.oauth.token.provider=module:callable`` names a callable
  that returns a token (a string) or a kafka-python
  :class:`~kafka.net.sasl.oauth.AbstractTokenProvider` (a provider class qualifies). The
  options carry the reference only, never an object: they are planned, checkpointed and
  pickled to the tasks. :func:`check_reference` imports the module and checks the callable
  when the options are parsed, on the driver before any data moves;
  :func:`token_provider` makes the provider where each client is made (the executors'
  readers, the sink's producers, the CLI), once per process and reference.
* **A token string** is asked for again at each authentication (a token expires, and the
  callable is where it is refreshed); **a provider** is kept and asked by kafka-python.
* **Tokens are secrets**: each one a provider hands out is taken out of every log record
  of the process (kafka-python logs the SASL exchange at DEBUG), and no ``repr`` shows one.
* **AWS MSK IAM** (``<prefix>sasl.mechanism=AWS_MSK_IAM``) is OAUTHBEARER with
  :class:`MskIamTokenProvider`: a SigV4-signed token from ``aws-msk-iam-sasl-signer-python``
  (``pip install 'gtbarrier[msk]'``), the credentials from botocore's default chain (the
  environment, ``AWS_PROFILE``, the instance's role...) where the client is made, the
  region ``<prefix>sasl.aws.region`` or else ``AWS_REGION``/``AWS_DEFAULT_REGION`` there.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from state.errors import ConfigError
from state.secrets import hide_in_logs

TOKEN_PROVIDER = "sasl.oauth.token.provider"
"""The setting (under a client's prefix) that names the token provider."""
AWS_REGION = "sasl.aws.region"
"""The setting of AWS MSK IAM's region (not a kafka-python argument)."""
REGION_ARG = "sasl_aws_region"
""":data:`AWS_REGION` among the arguments until the client is made, where it is taken out."""
MSK_IAM = "AWS_MSK_IAM"
"""The mechanism name Java's client takes with Amazon's ``aws-msk-iam-auth`` library."""
MSK_IAM_PROVIDER = "state.kafka_oauth:MskIamTokenProvider"
"""The reference AWS MSK IAM stands for."""
REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")
SIGNER_PACKAGE = "aws_msk_iam_sasl_signer"
# A signed token is valid for 15 minutes; a new one is made a minute before that.
_RENEW_BEFORE_MS = 60_000

_REFERENCE = re.compile(r"(?P<module>[A-Za-z_][\w.]*):(?P<name>[A-Za-z_][\w.]*)")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")


def check_reference(option: str, value: str, where: str) -> str:
    """``value`` (of ``option``), stripped, if it names a callable (``module:callable``,
    the module importable here); else :class:`ConfigError` naming the option, the value
    and what was expected. The callable is not called."""
    reference = value.strip()
    _load(reference, option, where)
    return reference


def check_region(option: str, value: str, where: str) -> str:
    """``value`` if it looks like an AWS region (``eu-west-1``); else :class:`ConfigError`."""
    region = value.strip()
    if not _REGION.fullmatch(region):
        raise ConfigError(option, value, "an AWS region such as eu-west-1", where=where)
    return region


def check_signer(option: str, where: str) -> None:
    """:class:`ConfigError` unless the MSK IAM signer is installed (on the driver; the
    executors need it too)."""
    if importlib.util.find_spec(SIGNER_PACKAGE) is None:
        raise ConfigError(
            option,
            MSK_IAM,
            "the aws-msk-iam-sasl-signer-python package installed on the driver and every "
            "executor (pip install 'gtbarrier[msk]')",
            where=where,
        )


def _load(reference: str, option: str, where: str) -> Callable[..., Any]:
    found = _REFERENCE.fullmatch(reference)
    if found is None:
        raise ConfigError(
            option,
            reference,
            "module:callable (a callable that returns a token string or a kafka-python "
            "AbstractTokenProvider, e.g. mypackage.auth:token)",
            where=where,
        )
    module_name, name = found.group("module"), found.group("name")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(
            option,
            reference,
            f"an importable module before the colon ({module_name}: {type(err).__name__}: "
            f"{err}), installed on the driver and every executor",
            where=where,
        ) from None
    target: Any = module
    for part in name.split("."):
        if not hasattr(target, part):
            raise ConfigError(
                option,
                reference,
                f"module:callable (the module {module_name} names no attribute {name})",
                where=where,
            )
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(
            option,
            reference,
            f"module:callable ({name} is a {type(target).__name__}, not a callable)",
            where=where,
        )
    return target  # type: ignore[no-any-return]


class ReferencedTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """The provider a client is given for a reference: the callable's own provider if it
    makes one, else the callable asked for a token at each authentication. Each token is
    hidden from log records; ``repr`` names the reference only (the source's consumer pool
    keys its consumers by their settings' ``repr``)."""

    def __init__(
        self,
        reference: str,
        *,
        option: str,
        where: str,
        make: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__()
        self.reference = reference
        self._option = option
        self._where = where
        self._make = make
        self._lock = threading.Lock()
        self._inner: AbstractTokenProvider | None = None

    def _callable(self) -> Callable[[], Any]:
        if self._make is None:
            self._make = _load(self.reference, self._option, self._where)
        return self._make

    def token(self) -> str:
        with self._lock:
            inner = self._inner
        given = inner.token() if inner is not None else self._callable()()
        if isinstance(given, AbstractTokenProvider):
            with self._lock:
                self._inner = given
            given = given.token()
        if not isinstance(given, str) or not given:
            raise ConfigError(
                self._option,
                self.reference,
                f"a callable that returns a token string or a kafka-python "
                f"AbstractTokenProvider (it returned a {type(given).__name__})",
                where=self._where,
            )
        _hide(given)
        return given

    def extensions(self) -> dict[str, str]:
        with self._lock:
            inner = self._inner
        return dict(inner.extensions()) if inner is not None else {}

    def __repr__(self) -> str:
        return f"<token provider {self.reference}>"


def _hide(token: str) -> None:
    """Take ``token`` out of every log record of the process from now on, whichever logger
    makes it (kafka-python logs the SASL exchange, the token in it, at DEBUG)."""
    hide_in_logs(token)


class MskIamTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """AWS MSK IAM's token: ``generate_auth_token(region)`` of
    ``aws-msk-iam-sasl-signer-python``, kept until a minute before it expires.

    ``region``: the cluster's, else ``AWS_REGION``/``AWS_DEFAULT_REGION`` of this process
    (read when the first token is made); none is a :class:`ConfigError` naming
    ``option``."""

    def __init__(
        self, region: str | None = None, *, option: str = "kafka." + AWS_REGION, where: str = ""
    ) -> None:
        super().__init__()
        self._region = region
        self._option = option
        self._where = where
        self._lock = threading.Lock()
        self._token: str | None = None
        self._token_region: str | None = None
        self._expires_ms = 0

    def region(self) -> str:
        if self._region:
            return self._region
        for name in REGION_ENV:
            if os.environ.get(name):
                return os.environ[name]
        raise ConfigError(
            self._option,
            None,
            f"the AWS region of the MSK cluster (e.g. eu-west-1), as this option or as "
            f"{' or '.join(REGION_ENV)} where the client is made",
            where=self._where,
        )

    def token(self) -> str:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

        region = self.region()
        with self._lock:
            now_ms = time.time() * 1000
            fresh = self._token is not None and self._token_region == region
            if not fresh or now_ms >= self._expires_ms - _RENEW_BEFORE_MS:
                token, expires_ms = MSKAuthTokenProvider.generate_auth_token(region)
                _hide(token)
                self._token, self._expires_ms = token, int(expires_ms)
                self._token_region = region
            assert self._token is not None
            return self._token

    def __repr__(self) -> str:
        return f"<AWS MSK IAM token provider {self._region or 'region from the environment'}>"


# One MSK IAM provider per region (and option) in a process: every client shares its
# token until it is about to expire, rather than signing one per connection.
_MSK: dict[tuple[str | None, str], MskIamTokenProvider] = {}
_MSK_LOCK = threading.Lock()


def token_provider(
    reference: str, *, option: str, where: str, region: str | None = None
) -> AbstractTokenProvider:
    """The provider a client made here gets for ``reference`` (the value of ``option``):
    for :data:`MSK_IAM_PROVIDER` the process's :class:`MskIamTokenProvider` of ``region``,
    else a :class:`ReferencedTokenProvider` of the callable, imported now. An unloadable
    reference is a :class:`ConfigError` naming ``option``."""
    if reference == MSK_IAM_PROVIDER:
        region_option = option.removesuffix(TOKEN_PROVIDER) + AWS_REGION
        with _MSK_LOCK:
            found = _MSK.get((region, region_option))
            if found is None:
                found = MskIamTokenProvider(region, option=region_option, where=where)
                _MSK[(region, region_option)] = found
            return found
    make = _load(reference, option, where)
    return ReferencedTokenProvider(reference, option=option, where=where, make=make)
