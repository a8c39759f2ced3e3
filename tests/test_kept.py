"""A workload's tensors kept on the device between runs (trial/service/kept.py): made once, fresh copies for
every run, the checked outputs gathered there; each run of a runner sees an unwritten output."""
import numpy as np
import tvm

from trial.measure import Options, measure
from trial.service import gather, kept
from trial.target import resolve
from trial.verify import Reference
from trial.workload import parse


def _prepared(where, key, reference, dev):
    library = gather.library(reference.wl, len(reference.flat_indices), resolve("llvm"))
    return kept.prepared(where, key, reference, dev, lambda: tvm.runtime.load_module(library)["main"])


def test_runs_get_fresh_copies_of_tensors_made_once():
    wl, dev = parse("mm", "N16K8M12"), tvm.cpu()
    reference = Reference.of(wl, seed=1)
    args, out, sample = _prepared("test", "A", reference, dev)
    made = kept._KEPT["test"].made
    assert [a.numpy().tolist() for a in args] == [x.tolist() for x in reference.inputs]
    assert np.isnan(out.numpy()).all()  # unwritten
    args[0].copyfrom(np.zeros(wl.input_shapes[0], "float32"))  # a run that spoils its inputs and writes C
    out.copyfrom(np.ones(wl.output_shape, "float32"))
    np.testing.assert_array_equal(sample(out), np.ones(len(reference.flat_indices)))  # the checked elements
    again, out_again, _ = _prepared("test", "A", reference, dev)
    assert kept._KEPT["test"].made is made  # not made again
    np.testing.assert_array_equal(again[0].numpy(), reference.inputs[0])  # fresh copies of what was made
    assert np.isnan(out_again.numpy()).all()
    other = Reference.of(parse("mm", "N8K8M8"), seed=1)
    _prepared("test", "B", other, dev)
    assert kept._KEPT["test"].key == "B"  # one workload kept a device
    kept.forget("test")


def test_tensors_that_would_fill_the_device_are_not_kept():
    class Small:
        available_global_memory = 1024  # bytes free: less than four times two copies

    reference = Reference.of(parse("mm", "N16K8M12"), seed=1)
    assert kept.prepared("small", "A", reference, Small(), lambda: None) == (None, None, None)
    assert "small" not in kept._KEPT


def test_each_run_of_a_runner_starts_from_an_unwritten_output(private_service):
    """A kernel that writes half of C, after a correct one has run on the same runner, is caught."""
    wl, options = parse("mm", "N64K64M64"), Options(target="llvm", min_repeat_ms=1)
    assert measure(wl, None, options).status == "ok"
    half = measure(wl, None, Options(**{**options.__dict__, "template": "faulty_templates:WritesHalf"}))
    assert half.status == "wrong_result" and "nan" in half.reason, half.reason
    assert measure(wl, None, options).status == "ok"
