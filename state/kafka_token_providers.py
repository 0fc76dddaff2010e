"""The OAUTHBEARER token providers a Kafka client is given where it is made
(:mod:`state.kafka_oauth` checks the options that name them, without importing
kafka-python): a referenced callable's provider, and AWS MSK IAM's."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from state.errors import ConfigError
from state.kafka_oauth import (
    AWS_REGION,
    MSK_IAM_PROVIDER,
    REGION_ENV,
    TOKEN_PROVIDER,
    load_reference,
)
from state.secrets import hide_in_logs

# A signed token is valid for 15 minutes; a new one is made a minute before that.
_RENEW_BEFORE_MS = 60_000


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
            self._make = load_reference(self.reference, self._option, self._where)
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
    make = load_reference(reference, option, where)
    return ReferencedTokenProvider(reference, option=option, where=where, make=make)
