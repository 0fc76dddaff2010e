"""Prometheus endpoints in the integration tests: ``gtbarrier exporter`` as a subprocess,
and scrapes parsed into samples."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harness.ports import LOOPBACK
from harness.process import REPO_ROOT

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
SERVING = re.compile(r"serving (https?://\S+/metrics)")


def scrape(url: str, timeout: float = 30.0) -> tuple[str, Samples]:
    """The text at ``url`` and its samples by ``(name, sorted labels)``."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        text = answer.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name`` with exactly ``labels`` (None: not there)."""
    return samples.get((name, tuple(sorted(labels.items()))))


@dataclass
class ExporterRun:
    url: str
    output: Path
    process: subprocess.Popen[str]

    def text(self) -> str:
        """What the exporter printed so far (stdout and stderr)."""
        return self.output.read_text()


@contextmanager
def exporter(
    args: Sequence[str], *, env: Mapping[str, str], output: Path, timeout: float = 120.0
) -> Iterator[ExporterRun]:
    """``python -m gtbarrier exporter ARGS`` on a free loopback port, its output in
    ``output`` (a file: a pipe nobody reads fills up); stopped with SIGTERM on exit.
    AssertionError if it does not serve within ``timeout``."""
    argv = [sys.executable, "-m", "gtbarrier", "exporter", *args]
    with output.open("w") as sink:
        proc = subprocess.Popen(
            [*argv, "--port", "0", "--address", LOOPBACK],
            cwd=REPO_ROOT,
            env=dict(env),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + timeout
        found = None
        while found is None and proc.poll() is None and time.monotonic() < deadline:
            found = SERVING.search(output.read_text())
            if found is None:
                time.sleep(0.1)
        if found is None:
            raise AssertionError(f"the exporter does not serve: {output.read_text()[-3000:]}")
        yield ExporterRun(found.group(1), output, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
