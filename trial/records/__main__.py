"""python -m trial.records: see cli.py."""
from .cli import main

raise SystemExit(main())
