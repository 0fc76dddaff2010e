"""SASL OAUTHBEARER token providers for every Kafka client gtbarrier makes, named by
reference, and the built-in one of AWS MSK IAM.

* **By reference.** ``<prefix>sasl.oauth.token.provider=module:callable`` names a callable
  that returns a token (a string) or a kafka-python
  :class:`~kafka.net.sasl.oauth.AbstractTokenProvider` (a provider class qualifies). The
  options carry the reference only, never an object: they are planned, checkpointed and
  pickled to the tasks. :func:`check_reference` imports the module and checks the callable
  when the options are parsed, on the driver before any data moves;
  :func:`state.kafka_token_providers.token_provider` makes the provider where each client
  is made (the executors' readers, the sink's producers, the CLI), once per process and
  reference. That module imports kafka-python; this one does not, so parsing options
  loads no client library.
* **A token string** is asked for again at each authentication (a token expires, and the
  callable is where it is refreshed); **a provider** is kept and asked by kafka-python.
* **Tokens are secrets**: each one a provider hands out is taken out of every log record
  of the process (kafka-python logs the SASL exchange at DEBUG), and no ``repr`` shows one.
* **AWS MSK IAM** (``<prefix>sasl.mechanism=AWS_MSK_IAM``) is OAUTHBEARER with
  :class:`~state.kafka_token_providers.MskIamTokenProvider`: a SigV4-signed token from
  ``aws-msk-iam-sasl-signer-python``
  (``pip install 'gtbarrier[msk]'``), the credentials from botocore's default chain (the
  environment, ``AWS_PROFILE``, the instance's role...) where the client is made, the
  region ``<prefix>sasl.aws.region`` or else ``AWS_REGION``/``AWS_DEFAULT_REGION`` there.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable
from typing import Any

from state.errors import ConfigError

TOKEN_PROVIDER = "sasl.oauth.token.provider"
"""The setting (under a client's prefix) that names the token provider."""
AWS_REGION = "sasl.aws.region"
"""The setting of AWS MSK IAM's region (not a kafka-python argument)."""
REGION_ARG = "sasl_aws_region"
""":data:`AWS_REGION` among the arguments until the client is made, where it is taken out."""
MSK_IAM = "AWS_MSK_IAM"
"""The mechanism name Java's client takes with Amazon's ``aws-msk-iam-auth`` library."""
MSK_IAM_PROVIDER = "state.kafka_token_providers:MskIamTokenProvider"
"""The reference AWS MSK IAM stands for."""
REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")
SIGNER_PACKAGE = "aws_msk_iam_sasl_signer"

_REFERENCE = re.compile(r"(?P<module>[A-Za-z_][\w.]*):(?P<name>[A-Za-z_][\w.]*)")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")


def check_reference(option: str, value: str, where: str) -> str:
    """``value`` (of ``option``), stripped, if it names a callable (``module:callable``,
    the module importable here); else :class:`ConfigError` naming the option, the value
    and what was expected. The callable is not called."""
    reference = value.strip()
    load_reference(reference, option, where)
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


def load_reference(reference: str, option: str, where: str) -> Callable[..., Any]:
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
