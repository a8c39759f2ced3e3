import pytest


@pytest.fixture(autouse=True)
def _private_device_locks(tmp_path_factory, monkeypatch):
    """Tests never contend for device locks with anything else running on the machine."""
    monkeypatch.setenv("OPEVO_LOCK_DIR", str(tmp_path_factory.getbasetemp() / "locks"))
