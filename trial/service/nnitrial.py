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

_ancestors_at_start: list[int] | None = None
"""The pids of this trial's ancestors when it received its parameters (`receive`), nearest first."""


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


def _ancestors() -> list[int]:
    """This process's ancestors' pids, nearest first; empty where the system does not say (no check then)."""
    try:
        return [parent.pid for parent in psutil.Process().parents()]
    except psutil.Error:
        return []


def _ask(message: dict[str, Any]) -> dict[str, Any]:
    answer = client.request(message)
    if "error" in answer:
        raise ChannelError(answer["error"])
    return answer


def receive() -> tuple[dict[str, Any] | None, Any]:
    """This trial's parameters and their parameter id, as `nni.get_next_parameter()` gives them."""
    global _ancestors_at_start
    _ancestors_at_start = _ancestors()
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
    that started the trial has gone (`receive` noted the trial's ancestors)."""
    now = _ancestors() if _ancestors_at_start is not None else None
    if now != _ancestors_at_start:
        raise Orphaned(f"NNI's manager that started trial {os.environ.get('NNI_TRIAL_JOB_ID')} has gone (the "
                       f"trial's ancestors were {_ancestors_at_start}, now {now}); result not reported")
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
