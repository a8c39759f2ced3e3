"""NNI's remote training service, end to end on the CPU: an sshd on 127.0.0.1 (Debian's openssh-server,
`make test-debs`) with throwaway keys stands in for a remote machine; `python -m experiments.remote` turns
a generated config into one whose trials run there, and `nnictl create` runs it to DONE."""
import getpass
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from nni_experiment import free_port, log_tail, running, write_config

from experiments import remote, tune
from trial.results import STATUSES

SSHD = "/usr/sbin/sshd"


@pytest.fixture
def sshd(tmp_path):
    """An sshd on a free port of 127.0.0.1 that lets this user in with a key made for the test."""
    if not Path(SSHD).exists():
        pytest.fail(f"{SSHD} is missing: `make test-debs` installs Debian's openssh-server", pytrace=False)
    keys = tmp_path / "ssh"
    keys.mkdir()
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
    shutil.copy(keys / "user.pub", keys / "authorized_keys")
    port = free_port()
    (keys / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\nAuthorizedKeysFile {keys / 'authorized_keys'}\n"
        f"PidFile {keys / 'sshd.pid'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation folder
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(keys / "sshd_config")], stderr=open(keys / "log", "w"))
    login = ["ssh", "-i", str(keys / "user"), "-p", str(port), "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", f"{getpass.getuser()}@127.0.0.1", "true"]
    deadline = time.monotonic() + 30
    while subprocess.run(login, capture_output=True).returncode:
        assert time.monotonic() < deadline and proc.poll() is None, (keys / "log").read_text()
        time.sleep(0.2)
    yield port, keys / "user"
    proc.kill()
    proc.wait()


def test_machine_and_config_checks(tmp_path):
    entry = remote.machine("opevo@gpu1:2222", Path("~/.ssh/k"), "/opt/opevo/.venv/bin/python")
    assert entry == {"host": "gpu1", "port": 2222, "user": "opevo", "sshKeyFile": str(Path("~/.ssh/k").expanduser()),
                     "pythonPath": "/opt/opevo/.venv/bin"}
    for bad in ("gpu1", "opevo@gpu1:0", "opevo@gpu1:70000", "a b@c"):
        with pytest.raises(ValueError, match="expected USER@HOST"):
            remote.machine(bad, Path("k"), "/p/python")
    with pytest.raises(ValueError, match="not a suite experiment"):
        remote.remote_config({"trialCommand": "python3 train.py"}, [entry], "/p/python")
    with pytest.raises(SystemExit):
        remote.main([str(tmp_path / "c.yml"), "--machine", "u@h", "--python", "python3"])  # not a full path
    assert remote.rules_device({"tuner": {"classArgs": {"target": "sm_90"}}}) == "architecture sm_90"
    assert remote.rules_device({"tuner": {"classArgs": {"target": "auto"}}}) == "each trial's own device (target auto)"
    assert remote.rules_device({"tuner": {"name": "Random"}}) == "the device its search_space_twin.json was written for"


def test_an_experiment_runs_its_trials_over_ssh_to_done(sshd, tmp_path, capsys):
    port, key = sshd
    config = write_config(tmp_path, "mm/N64K64M64", "opevo", trials=4, seed=0)
    assert remote.main([str(config), "--machine", f"{getpass.getuser()}@127.0.0.1:{port}", "--ssh-key", str(key),
                        "--python", sys.executable, "--manager-ip", "127.0.0.1"]) == 0
    assert "the tuner keeps the rules of cpu " in capsys.readouterr().err  # this machine's, written here
    remote_config = config.with_name("config_opevo_remote.yml")
    written = yaml.safe_load(remote_config.read_text())
    assert written["trialCommand"] == f"{sys.executable} -m trial mm N64K64M64 --tuner opevo"
    assert written["trainingService"]["machineList"][0]["port"] == port
    web = free_port()
    with running(remote_config, web) as exp_id:
        try:
            assert tune.wait(web, timeout_s=300, poll_s=2) == "DONE", log_tail(remote_config, exp_id)
            records = tune.trials(web)
        finally:  # what NNI left in this user's home for the "remote" machine
            shutil.rmtree(Path.home() / "nni-experiments" / exp_id, ignore_errors=True)
    assert len(records) == 4
    assert all(r.status == "SUCCEEDED" and r.metric["status"] in STATUSES for r in records), records
    assert any(r.metric["status"] == "ok" for r in records)
