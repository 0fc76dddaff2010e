"""Optional dependencies stay optional: with the extras' packages unimportable, the
source, the sink (file, s3, kafka, http consumers) and the CLI import, and ``gtbarrier
receiver`` names the extra it needs."""

from __future__ import annotations

from harness.process import run_python

OPTIONAL = ("starlette", "uvicorn", "psycopg", "pyiceberg", "matplotlib", "sqlalchemy")

CODE = f"""
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Block())
import gtbarrier, datasource, sink, state, pyspark_gtkafka, pyspark_barrier
import sink.writer, sink.consumers.file, sink.consumers.s3, sink.consumers.kafka.kafka_kind
import sink.consumers.http, state.coordinator, gtbarrier.cli
from gtbarrier.cli import main
assert main(["receiver", "--port", "1", "--dir", "x"]) == 2
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({OPTIONAL!r}))
assert not loaded, loaded
"""


def test_the_core_imports_no_optional_package() -> None:
    proc = run_python("-c", CODE)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'gtbarrier[receiver]'" in proc.stderr
