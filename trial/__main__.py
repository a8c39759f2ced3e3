"""python -m trial <op> <spec>: build, verify and time one kernel configuration.

Under NNI (the experiment's trialCommand) the knob values come from nni.get_next_parameter() and
the result goes to nni.report_final_result(); by hand they come from --params (default: the
template's hand-picked config) and the result is printed as one JSON line.  A configuration that
fails (invalid, compile_error, runtime_error, timeout, wrong_result) is a result too: it is
reported with default 0 and the process exits 0, so NNI never pairs a failure with other params.

Under NNI a measurement is recorded only once NNI took its result, so that the records hold what NNI
holds, trial by trial: a trial orphaned by a manager that died (killed, the machine rebooted) cannot
report, records nothing and exits 1, and NNI runs it again under the same trial id on `nnictl resume`;
that run's measurement is the trial's record (`trial.records.Records.append`).
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from typing import Any

from .blasthreads import load_numpy

load_numpy()  # before the imports below load it with a BLAS thread per core

from . import timeline  # noqa: E402
from .service import nnitrial  # noqa: E402
from .measure import Options, measure  # noqa: E402
from .inputs import InputError, load_json, number_type  # noqa: E402
from .results import MeasureResult, Status  # noqa: E402
from .remote import add_runner_argument  # noqa: E402
from .target import KINDS  # noqa: E402
from .workload import OPS, SpecError, Workload, parse  # noqa: E402

MAX_PARAMS_CHARS = 64 * 1024
EPILOG = """\
specs (all numbers positive; layout letters are N or T for A then B, default PNN):
  mm    N<n>K<k>M<m>[P<layout>][_<type>]   e.g. N512K1024M1024, N512K1024M1024PNT, N512K1024M1024_f16
  bmm   B<b>N<n>K<k>M<m>[P<layout>][_<type>]  e.g. B960N128K128M64PTN, B960N128K64M128PNT_i8
  conv  N<n>C<c>HW<hw>F<f>K<k>ST<s>PD<p>[_<type>]  e.g. N512C3HW227F64K11ST4PD0 (NCHW, square image/kernel),
        N32C64HW56F64K3ST1PD1_f16 (f16, bf16, tf32: NHWC, weights F x K x K x C, as channels_last)
  <type>: none (float32), f16, bf16, i8, e4m3 or tf32: the inputs' type (docs/tuning.md: Workload specs)

by hand:   python -m trial mm N512K1024M1024 --params '{"K": [1, 64, 4, 4], "X": [16, 1, 8, 4],
             "Y": [16, 1, 4, 16], "unroll": 16, "vec": 1, "pipeline": 0, "kmajor": 0, "pad": 0}'
under NNI: trialCommand: python -m trial mm N512K1024M1024   (knobs from the tuner)
remote:    python -m trial mm N512K1024M1024 --runner rpc://127.0.0.1:9190/h100   (TVM RPC tracker and key)

The result is {"default": gflops, "gflops", "latency_ms", "latency_std_ms", "build_s", "status",
"reason", "target", "device", "warning", "params", "parameter_id"}; status is one of ok, invalid,
compile_error, runtime_error, timeout, wrong_result; warning is "" unless the timing is doubtful
(its repeats spread widely, or other processes kept the CPU busy while it was timed).
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trial", description=__doc__.split("\n\n")[0],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("op", choices=OPS, help="operator")
    p.add_argument("spec", help="shape spec, see below")
    p.add_argument("--params", help="knob values as a JSON object (default: under NNI, the tuner's; "
                                    "else the hand-picked config)")
    p.add_argument("--target", choices=KINDS, default=os.environ.get("OPEVO_TARGET", "auto"),
                   help="where to build and run (default: $OPEVO_TARGET or auto: CUDA, then ROCm, then CPU)")
    add_runner_argument(p)
    p.add_argument("--build-timeout", type=number_type(float, 0.1, 3600), default=120.0,
                   help="seconds, 0.1 to 3600 (default 120)")
    p.add_argument("--run-timeout", type=number_type(float, 0.1, 3600), default=60.0,
                   help="seconds for verify + timing, 0.1 to 3600 (default 60)")
    p.add_argument("--repeat", type=number_type(int, 5, 1000), default=5, help="timed repeats, 5 to 1000 (default 5)")
    p.add_argument("--min-repeat-ms", type=number_type(int, 0, 60000), default=40,
                   help="minimum length of a repeat in ms, up to 60000 (default 40)")
    p.add_argument("--seed", type=number_type(int, 0, 2**32 - 1), default=0,
                   help="seed of the inputs and checked outputs (0 to 2^32-1)")
    p.add_argument("--tuner", help="name of the tuner that proposed the params, kept in the records")
    p.add_argument("--records", help="records store (default: $OPEVO_RECORDS or records/records.sqlite)")
    p.add_argument("--no-record", action="store_true", help="do not keep this measurement in the records")
    p.add_argument("--template", help=argparse.SUPPRESS)
    return p


def _params_arg(p: argparse.ArgumentParser, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = load_json(text, "--params", max_chars=MAX_PARAMS_CHARS)
    except InputError as err:
        p.error(str(err))
    if not isinstance(value, dict):
        p.error(f"--params must be a JSON object of knob values, got {type(value).__name__}")
    return value


def _record(args: argparse.Namespace, wl: Workload, result: MeasureResult) -> None:
    """Keep the measurement; a store that cannot be written costs a warning, never the result."""
    from .records import Records

    try:
        Records(args.records).append(wl, result, os.environ.get("NNI_EXP_ID"),
                                     os.environ.get("NNI_TRIAL_JOB_ID"), args.tuner)
    except (OSError, sqlite3.Error) as err:
        print(f"warning: measurement not recorded: {err}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    params = _params_arg(p, args.params)
    under_nni = params is None and nnitrial.under_nni()
    parameter_id = None
    if under_nni:
        timeline.mark_process_start("trial_started")
        timeline.mark("trial_asking")
        params, parameter_id = nnitrial.receive()
        timeline.mark("trial_received", parameter_id=parameter_id, trial=os.environ.get("NNI_TRIAL_JOB_ID"))
    result = None
    try:
        wl = parse(args.op, args.spec)
    except SpecError as err:
        if not under_nni:
            p.error(str(err))
        report = MeasureResult(Status.INVALID, str(err), params).report(parameter_id)
    else:
        options = Options(target=args.target, build_timeout_s=args.build_timeout,
                          run_timeout_s=args.run_timeout, repeat=args.repeat,
                          min_repeat_ms=args.min_repeat_ms, seed=args.seed, template=args.template,
                          runner=args.runner)
        result = measure(wl, params, options)
        report = result.report(parameter_id)
        timeline.mark("trial_measured", parameter_id=parameter_id, stages=result.extra.get("stages", {}),
                      cpu_s=result.extra.get("cpu_s", {}), device=result.device_index,
                      device_s=result.extra.get("device_s", {}), run_s=result.extra.get("run_s", {}))
    print(json.dumps(report), flush=True)
    if under_nni:
        try:
            nnitrial.report(report, parameter_id)
        except nnitrial.ChannelError as err:
            print(f"error: {err}\nThe measurement is not recorded: NNI does not have it, and runs this trial "
                  "again when the experiment is resumed.", file=sys.stderr)
            return 1
        timeline.mark("trial_reported", parameter_id=parameter_id)
    if result is not None and not args.no_record:
        _record(args, wl, result)
    timeline.mark_cpu("trial_done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
