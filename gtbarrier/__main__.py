"""``python -m gtbarrier``: the operator's command line (:mod:`gtbarrier.cli`)."""

from gtbarrier.cli import main

raise SystemExit(main())
