"""The records: every measurement kept (`store`), an NNI experiment's results imported (`nni_import`),
the best recorded kernel exported (`export`), and their command line (`python -m trial.records`)."""
from .store import Record, Records, RecordsError, as_template_takes, decode_metric, default_path, params_key

__all__ = ["Record", "Records", "RecordsError", "as_template_takes", "decode_metric", "default_path", "params_key"]
