"""Experiments: one folder per workload (`<op>/<spec>/`: search space and one NNI config per tuner),
the writer that makes them (`write`), the tuners they can run (`registry`), and the runner that
checks one (`preflight`), starts it with nnictl (`manager`), follows it (`progress`) and sums up what
it found (`summary`, `plots`, `commands`): `tune`."""
