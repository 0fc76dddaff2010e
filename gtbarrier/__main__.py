"""``python -m gtbarrier``: the operator's command line (:mod:`gtbarrier.cli`)."""

from gtbarrier.cli import run

run()
