import pytest


@pytest.fixture(autouse=True)
def _private_state(tmp_path_factory, monkeypatch):
    """Tests never contend for device locks or write records outside their temporary folder."""
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("OPEVO_LOCK_DIR", str(base / "locks"))
    monkeypatch.setenv("OPEVO_RECORDS", str(base / "records.sqlite"))
