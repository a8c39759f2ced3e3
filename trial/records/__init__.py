"""The records: every measurement kept (`store`), an NNI experiment's results imported (`nni_import`),
the best recorded kernel exported (`export`), and their command line (`python -m trial.records`)."""
from .store import Record, Records, RecordsError, decode_metric, default_path, fits_template, params_key

__all__ = ["Record", "Records", "RecordsError", "decode_metric", "default_path", "fits_template", "params_key"]
