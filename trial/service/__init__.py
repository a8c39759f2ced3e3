"""The measuring service: trials send it configurations (`client`); it builds them in spawned build
workers (`builder`) and verifies and times them on warm runners, two a GPU (`runner`), each a
spawned process (`worker`), serving every trial of the machine (`server`); it also carries a trial's
exchange with NNI (`nnitrial`).  docs/gpu-processes.md says why the processes are arranged so."""
