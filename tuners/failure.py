"""A tuner failure that ends the experiment as failed, with the tuner's message, instead of a silent stall.

NNI 3.0's dispatcher runs each command on a worker thread (nni/runtime/msg_dispatcher_base.py,
`command_queue_worker`). When a tuner method raises there, the worker logs the error to dispatcher.log and
stops; the dispatcher's main loop notices only when the next command arrives, and after a failed
`Initialize` (the tuner rejected the search space) none ever does: the manager waits for `Initialized`
and reports RUNNING, with no error and no trial, for as long as the experiment lives.

The dispatcher's own `report_error` sends NNI's Error command ('ER'), on which the manager sets the
experiment's status to ERROR at once (nni_node/core/tuner_command_channel.js turns 'ER' into an error
event; nni_node/core/nnimanager.js, `addEventListeners`, logs "Dispatcher error: <message>" to
nnimanager.log and calls `criticalError`). `/check-status` then answers ERROR, with NNI's fixed words
"Dispatcher stream error, tuner may have crashed." in `errors`; the web UI shows that status and error,
and its log panel the dispatcher log, where the tuner's message is.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import nni
from nni.runtime.msg_dispatcher_base import MsgDispatcherBase

from trial import timeline

_logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def running_dispatcher() -> MsgDispatcherBase | None:
    """The NNI dispatcher whose worker thread is calling the tuner now, or None (a test, the benchmarks).

    NNI keeps its dispatcher in a local of `nni.__main__.main`; the worker thread it runs the tuner on is
    `Thread(target=dispatcher.command_queue_worker)`, so the thread's target names it.
    """
    target = getattr(threading.current_thread(), "_target", None)
    owner = getattr(target, "__self__", None)
    return owner if isinstance(owner, MsgDispatcherBase) else None


def report(message: str) -> bool:
    """Tell the NNI manager the tuner failed (`message`), so the experiment ends as ERROR; whether one heard."""
    dispatcher = running_dispatcher()
    if dispatcher is None:
        return False
    _logger.error("%s", message)
    dispatcher.report_error(message)
    return True


def reported(what: str) -> Callable[[F], F]:
    """Decorate a tuner method of the NNI protocol: an exception it raises (other than NNI's
    `NoMoreTrialError`, which is how a tuner says it has nothing to propose) is reported to the manager,
    as "<tuner class> <what>: <error>", then raised as before.  With timelines on, each call is also
    marked as `tuner_call` with its seconds (`trial.timeline.timed`): NNI's dispatcher waits for them."""
    def wrap(method: F) -> F:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except nni.NoMoreTrialError:
                raise
            except Exception as err:
                report(f"{type(self).__name__} {what}: {err}")
                raise
        return timeline.timed("tuner_call")(call)  # type: ignore[return-value]
    return wrap
