"""A real Prometheus server (Debian's ``prometheus`` package) that scrapes given targets
and evaluates a rule file, for the alerting rules' integration test.

    server = PrometheusServer(workdir, targets=["127.0.0.1:9464"], rules=rules_text)
    with serving(server, "prometheus"):
        server.firing("GtbarrierPipelineStuck")   # the labels of each firing alert

It scrapes and evaluates every ``interval`` (1 s by default, so that a test can use short
``for`` windows), keeps its data in ``workdir``, and listens on a free loopback port.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from harness.ports import LOOPBACK, free_port
from harness.process import ManagedProcess
from harness.server import Server


class PrometheusServer(Server):
    """``prometheus`` on one loopback port, scraping ``targets`` (``host:port``) at
    ``/metrics`` and evaluating ``rules`` (the text of a rule file)."""

    NAME = "Prometheus server"
    ENV = "GTB_PROMETHEUS_URL"
    START_TIMEOUT = 60.0

    def __init__(
        self,
        workdir: Path | None,
        *,
        targets: list[str] | None = None,
        rules: str | None = None,
        interval: str = "1s",
        external_url: str | None = None,
    ) -> None:
        if external_url is not None:
            super().__init__(None)
            self.url = external_url.rstrip("/")
            return
        if workdir is None:
            raise ValueError("a workdir is needed to start Prometheus")
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError(
                "prometheus is not on PATH: scripts/setup.sh installs Debian's prometheus package"
            )
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        rules_path = workdir / "rules.yml"
        rules_path.write_text(rules or "groups: []\n")
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(rules_path)],
            "scrape_configs": [
                {"job_name": "gtbarrier", "static_configs": [{"targets": targets or []}]}
            ],
        }
        # JSON is YAML: no YAML writer needed for the configuration.
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(json.dumps(config, indent=2))
        self._binary = binary
        super().__init__(
            ManagedProcess(
                "prometheus",
                [binary],
                log_path=workdir / "prometheus.log",
                cwd=workdir,
            )
        )
        self._use_port(free_port())

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://{LOOPBACK}:{port}"
        self._owned().argv = [
            self._binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--log.level=warn",
        ]

    @classmethod
    def external_at(cls, address: str) -> PrometheusServer:
        return cls(None, external_url=address)

    @property
    def address(self) -> str:
        return self.url

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str) -> Any:
        """The ``data`` of a GET of ``/api/v1/<path>``."""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}", timeout=10) as answer:
            body = json.loads(answer.read())
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus /api/v1/{path}: {body}")
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert Prometheus holds now, pending or firing."""
        return list(self.api("alerts")["alerts"])

    def firing(self, name: str) -> list[dict[str, str]]:
        """The labels of each alert ``name`` that fires now."""
        return [
            a["labels"]
            for a in self.alerts()
            if a["labels"].get("alertname") == name and a["state"] == "firing"
        ]

    def targets_up(self) -> bool:
        """Whether every scrape target answered its last scrape."""
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)
