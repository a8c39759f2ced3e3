"""Which device trials use here: from the cache a trial left, else asked of a child process."""
import subprocess

from test_trial import GPU

from trial import target


def test_this_device_reads_what_a_trial_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("OPEVO_LOCK_DIR", str(tmp_path))

    def no_child(*args, **kwargs):
        raise AssertionError("a child process was started")

    target.save("cuda", GPU)
    monkeypatch.setattr(subprocess, "run", no_child)
    assert target.this_device("cuda") == "test GPU"


def test_this_device_asks_a_child_and_caches_its_answer(monkeypatch, tmp_path):
    monkeypatch.setenv("OPEVO_LOCK_DIR", str(tmp_path))
    assert target.load("llvm") is None
    name = target.this_device("llvm")
    assert name and target.load("llvm").device_name == name
