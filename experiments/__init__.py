"""Experiments: one folder per workload (`<op>/<spec>/`: search space and one NNI config per tuner),
the writer that makes them (`write`), the tuners they can run (`registry`), and the runner that
starts one with nnictl and follows it to the end (`tune`)."""
