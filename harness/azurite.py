"""Azure Blob Storage for tests and the demo: Azurite's blob service on a free loopback port.

* :class:`AzuriteServer` (a :class:`~harness.server.Server`): ``azurite-blob`` from the
  project-local npm install that ``scripts/setup.sh`` makes (``.services/azurite``), in
  memory, over plain HTTP, with Azurite's well-known development account; or the server at
  ``GTB_AZURE_ENDPOINT`` (with ``GTB_AZURE_ACCOUNT_NAME`` / ``GTB_AZURE_ACCOUNT_KEY``).
  ``.endpoint`` (the account's blob URL), ``.options()`` (the ``azure.*`` options of
  gtbarrier's data sources), ``.settings()``, ``.client()``.
* :class:`AzureContainer`: one fresh container. ``.container``, ``.uri(prefix)``,
  ``.config(prefix)``, ``.store(prefix)``, ``.cleanup()``.

Azurite enforces what the az store relies on: ``If-None-Match: *`` (409 when the blob
exists) and ``If-Match`` (412 on another ETag, and on a missing blob).
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from harness.ports import LOOPBACK, free_port
from harness.process import REPO_ROOT, ManagedProcess, repo_env
from harness.server import Server
from state.retry import Retry
from state.stores import AzureSettings, StoreConfig

if TYPE_CHECKING:
    from azure.storage.blob import BlobServiceClient

    from state.stores.azure_store import AzureStore

AZURITE_DIR = REPO_ROOT / ".services" / "azurite"
# Azurite's documented development account; it is public and accepted by no real service.
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> Path:
    """``azurite-blob`` of the project-local install; a clear error if it is missing."""
    path = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    if not path.exists():
        raise RuntimeError(
            f"Azurite is not installed at {AZURITE_DIR}: run scripts/setup.sh (it npm-installs "
            "a pinned azurite there), or set GTB_AZURE_ENDPOINT to a running blob service"
        )
    return path


class AzuriteServer(Server):
    """Azurite's blob service on a loopback port (or an external blob endpoint)."""

    NAME = "Azure Blob emulator (Azurite)"
    ENV = "GTB_AZURE_ENDPOINT"
    START_TIMEOUT = 60.0
    LOG: ClassVar[str] = "azurite.log"

    def __init__(self, workdir: Path | None, *, external_endpoint: str | None = None) -> None:
        self.account_name = os.environ.get("GTB_AZURE_ACCOUNT_NAME", DEV_ACCOUNT)
        self.account_key = os.environ.get("GTB_AZURE_ACCOUNT_KEY", DEV_KEY)
        if external_endpoint is not None:
            super().__init__(None)
            self.endpoint = external_endpoint.rstrip("/")
            return
        if workdir is None:
            raise ValueError(f"a workdir is needed to start the {self.NAME}")
        self.workdir = workdir
        super().__init__(
            ManagedProcess(
                "azurite blob", [], log_path=workdir / self.LOG, cwd=REPO_ROOT, env=repo_env()
            )
        )
        self._use_port(free_port())

    @property
    def address(self) -> str:
        return self.endpoint

    @classmethod
    def external_at(cls, address: str) -> Self:
        return cls(None, external_endpoint=address)

    def _use_port(self, port: int) -> None:
        self.port = port
        self.endpoint = f"http://{LOOPBACK}:{port}/{self.account_name}"
        self._owned().argv = [
            str(azurite_binary()),
            "--blobHost", LOOPBACK,
            "--blobPort", str(port),
            "--inMemoryPersistence",
            "--disableTelemetry",  # it would call out to the internet
            "--skipApiVersionCheck",  # the SDK may be newer than the emulator
        ]  # fmt: skip

    def ready(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=1):
                return True
        except OSError:
            return False

    def settings(self, **overrides: Any) -> AzureSettings:
        values: dict[str, Any] = {
            "endpoint": self.endpoint,
            "account_name": self.account_name,
            "account_key": self.account_key,
        }
        values.update(overrides)
        return AzureSettings(**values)

    def options(self) -> dict[str, str]:
        """``azure.*`` options for gtbarrier's data sources and coordinator, pointing here."""
        return {
            "azure.endpoint": self.endpoint,
            "azure.accountName": self.account_name,
            "azure.accountKey": self.account_key,
        }

    def client(self) -> BlobServiceClient:
        """An azure-storage-blob client for setup and inspection."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(
            self.endpoint,
            credential={"account_name": self.account_name, "account_key": self.account_key},
        )


class AzureContainer:
    """One fresh container on ``server``; :meth:`cleanup` deletes it."""

    def __init__(self, server: AzuriteServer) -> None:
        self.server = server
        self.container = f"gtb-{uuid.uuid4().hex[:12]}"
        self._client = server.client()
        self._client.create_container(self.container)

    def uri(self, prefix: str = "") -> str:
        prefix = prefix.strip("/")
        return f"az://{self.container}/{prefix}" if prefix else f"az://{self.container}"

    def config(self, prefix: str = "", **overrides: Any) -> StoreConfig:
        return StoreConfig(self.uri(prefix), azure=self.server.settings(**overrides))

    def store(
        self, prefix: str = "", *, retry: Retry | None = None, **overrides: Any
    ) -> AzureStore:
        """A new, unshared store on this container (settings ``overrides`` on the server's)."""
        from state.stores.azure_store import AzureStore

        return AzureStore(self.config(prefix, **overrides), retry=retry)

    def cleanup(self) -> None:
        self._client.delete_container(self.container)
