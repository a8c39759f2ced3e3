"""Which device trials use here: from the cache the measuring service left, else asked of the service."""
from test_trial import GPU

from trial import measure, target
from trial.service import client


def test_this_device_reads_what_the_service_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("OPEVO_LOCK_DIR", str(tmp_path))

    def no_service(*args, **kwargs):
        raise AssertionError("the measuring service was asked")

    target.save("cuda", GPU)
    monkeypatch.setattr(client, "request", no_service)
    assert measure.this_device("cuda") == "test GPU"


def test_this_device_asks_the_service_which_caches_its_answer(private_service):
    assert target.load("llvm") is None
    name = measure.this_device("llvm")
    assert name and target.load("llvm").device_name == name
