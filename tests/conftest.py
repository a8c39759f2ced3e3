import pytest


@pytest.fixture(autouse=True)
def _private_state(tmp_path_factory, tmp_path, monkeypatch):
    """Each test gets its own empty records store, under its tmp_path, so no test sees what another
    recorded. The lock folder (device locks, cached device descriptions) is one for the whole session,
    on purpose: tests that measure share the devices and take turns, as trials do; none of them ever
    touches the user's own lock folder or store."""
    monkeypatch.setenv("OPEVO_LOCK_DIR", str(tmp_path_factory.getbasetemp() / "locks"))
    monkeypatch.setenv("OPEVO_RECORDS", str(tmp_path / "records" / "records.sqlite"))
