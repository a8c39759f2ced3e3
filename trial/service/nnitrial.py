"""A trial's exchange with NNI: its knob values in, its result out.

NNI 3.0's training services give each trial an HTTP command channel ($NNI_TRIAL_COMMAND_CHANNEL).
Importing NNI's SDK costs a trial process seconds (its package imports scipy and pandas), more than
most measurements take, so the trial asks the measuring service to talk to that channel for it:
the service holds NNI's own channel class (`TrialCommandChannelV3`), imported once, and uses it as
NNI's SDK would (`fetch`, `send`).  Other channels (NNI's legacy file channel) go through the SDK in
the trial process.

A trial outlives NNI's manager when the manager is killed: it then must not report, since a resumed
manager on the same port would take the result as that of the trial it runs again under the same id
(and the records would then disagree with NNI). The trial notes its ancestors when it receives its
parameters; if one of them has gone by the time it reports (the manager, or the shell between), it is
orphaned and `report` raises `Orphaned`.
"""
from __future__ import annotations

import os
from typing import Any

import psutil

from . import client

_lineage_at_start: list[psutil.Process] | None = None
"""This trial's ancestors when it received its parameters (`receive`), nearest first, up to NNI's manager."""


def under_nni() -> bool:
    """Whether NNI started this process as a trial."""
    return os.environ.get("NNI_PLATFORM") not in (None, "unittest")


def _channel() -> str | None:
    url = os.environ.get("NNI_TRIAL_COMMAND_CHANNEL", "")
    return url if url.startswith("http://") else None


class ChannelError(RuntimeError):
    """NNI's trial channel failed; the trial cannot get its parameters or give its result."""


class Orphaned(ChannelError):
    """NNI's manager that started this trial has gone; its result must not reach another one."""


MANAGER_MARK = "nni_node"
"""A word of the NNI manager's command line (`node ... nni_node/main.js ...`)."""


def _lineage() -> list[psutil.Process]:
    """This process's ancestors, nearest first, up to and including NNI's manager where one of them is (what
    lies above it, such as an `nnictl create` that exits once the manager answers, is no business of the
    trial's), else all of them; empty where the system does not say (no check then)."""
    lineage = []
    try:
        for parent in psutil.Process().parents():
            lineage.append(parent)
            if any(MANAGER_MARK in part for part in parent.cmdline()):
                break
    except psutil.Error:
        return []
    return lineage


def _gone(lineage: list[psutil.Process]) -> list[int]:
    """The pids of `lineage` that no longer run (`is_running` also tells a reused pid from its process)."""
    return [p.pid for p in lineage if not p.is_running()]


def _ask(message: dict[str, Any]) -> dict[str, Any]:
    answer = client.request(message)
    if "error" in answer:
        raise ChannelError(answer["error"])
    return answer


def receive() -> tuple[dict[str, Any] | None, Any]:
    """This trial's parameters and their parameter id, as `nni.get_next_parameter()` gives them."""
    global _lineage_at_start
    _lineage_at_start = _lineage()
    url = _channel()
    if url:
        answer = _ask({"request": "nni_receive", "channel": url})
        return answer["parameters"], answer["parameter_id"]
    import nni  # the SDK's channels read files and environment of this process
    import nni.trial

    params = nni.get_next_parameter()
    return params, nni.trial._params["parameter_id"] if nni.trial._params else None


def report(metric: dict[str, Any], parameter_id: Any) -> None:
    """Send the trial's final result, as `nni.report_final_result(metric)` does; `Orphaned` if the manager
    that started the trial, or a process between it and the trial, has gone (`receive` noted them)."""
    gone = _gone(_lineage_at_start or [])
    if gone:
        raise Orphaned(f"NNI's manager that started trial {os.environ.get('NNI_TRIAL_JOB_ID')} has gone (of the "
                       f"trial's ancestors {[p.pid for p in _lineage_at_start]}, {gone} no longer run); "
                       "result not reported")
    url = _channel()
    if url:
        _ask({"request": "nni_report", "channel": url, "parameter_id": parameter_id,
              "trial_job_id": os.environ.get("NNI_TRIAL_JOB_ID"), "metric": metric})
        return
    import nni

    nni.report_final_result(metric)


def fetch(url: str) -> dict[str, Any]:
    """In the service: the parameter record that NNI's channel at `url` holds for its trial."""
    from nni.runtime.trial_command_channel.v3 import TrialCommandChannelV3  # once per service: seconds

    record = TrialCommandChannelV3(url).receive_parameter()
    if record is None:
        raise RuntimeError(f"NNI's trial channel {url} is closed")
    return {"parameters": record["parameters"], "parameter_id": record["parameter_id"]}


def send(url: str, parameter_id: Any, trial_job_id: str | None, metric: dict[str, Any]) -> None:
    """In the service: the trial's final result to NNI's channel at `url`."""
    from nni.runtime.trial_command_channel.v3 import TrialCommandChannelV3

    TrialCommandChannelV3(url).send_metric("FINAL", parameter_id, trial_job_id, 0, metric)
