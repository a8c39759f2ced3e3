"""NNI's TPE tuner, made safe for results that arrive after their trial's end.

NNI 3.0's dispatcher may process a trial's end before its final result; the built-in TpeTuner then
forgets the parameters in `trial_end` and raises KeyError in `receive_trial_result`, which kills the
dispatcher and leaves the experiment running with no new trials.  This subclass restores the
parameters from its full history first.  The twin configs use it in place of `name: TPE`.
"""
from __future__ import annotations

from typing import Any

from nni.algorithms.hpo.tpe_tuner import TpeTuner


class TPETuner(TpeTuner):
    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        if parameter_id not in self._params:
            return  # not one of ours (e.g. a customised trial)
        self._running_params.setdefault(parameter_id, self._params[parameter_id])
        super().receive_trial_result(parameter_id, parameters, value, **kwargs)
