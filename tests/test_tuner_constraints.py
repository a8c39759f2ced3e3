"""With a target, every suite tuner proposes only kernels the device can run (issue: most of a GPU
kernel's factor space is beyond its limits, and tuners used to spend their budgets there)."""
import pytest
from tuner_harness import FakeNNI, make_tuner, no_checkpoint_dir  # noqa: F401

from benchmarks.proposals import AWKWARD, STUDY, stand_in
from searchspace import ConstrainedSpace, SpaceError
from trial import templates
from trial.archs import target_of
from trial.workload import parse_name
from tuners.gbfs import GBFSTuner
from tuners.ledger import RANDOM_TRIES
from tuners.na2c import NA2CTuner
from tuners.opevo import OpEvoTuner

TUNERS = [OpEvoTuner, GBFSTuner, NA2CTuner]
PROPOSALS = 500


def kernel_speed(name, arch):
    """The proposals benchmark's GPU stand-in (`invalid` where the knob check refuses), as a trial's report."""
    wl = parse_name(name)
    template = templates.load(wl)
    evaluate = stand_in(wl, template, target_of(arch))
    return wl, template, lambda config: evaluate(config).report()


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("name", [*STUDY, *AWKWARD])
@pytest.mark.parametrize("cls", TUNERS, ids=lambda c: c.__name__)
def test_every_proposal_is_a_kernel_the_device_runs(cls, name, arch):
    wl, template, report = kernel_speed(name, arch)
    tuner = make_tuner(cls, template.search_space(wl), workload=name, target=arch, seed=1)
    assert isinstance(tuner.space, ConstrainedSpace)
    run = FakeNNI(tuner, report, concurrency=8).run(PROPOSALS)
    failed = sum(outcome is None for outcome in run.outcomes)
    assert len(run.proposed) == PROPOSALS
    assert failed <= 0.01 * PROPOSALS, f"{failed} of {PROPOSALS} proposals broke the device's rules"


@pytest.mark.parametrize("cls", TUNERS, ids=lambda c: c.__name__)
def test_a_random_draw_whose_repair_finds_nothing_is_drawn_again(cls, monkeypatch):
    # `sampling: nearest` repairs each draw to the rules, and a repair can end far from every valid
    # configuration (SpaceError): the draw is left and another made, and only a space where every draw
    # fails (the device runs none of its kernels) stops the run, with that error.
    wl, template, report = kernel_speed("mm/N512K1024M1024", "sm_90")
    sample_nearest, calls = ConstrainedSpace.sample_nearest, []

    def lost_every(nth):
        def draw(self, rng):
            calls.append(1)
            if len(calls) % nth == 0:
                raise SpaceError("found no configuration that keeps the rules near it")
            return sample_nearest(self, rng)
        return draw

    def run(proposals):
        tuner = make_tuner(cls, template.search_space(wl), workload=wl.name, target="sm_90", sampling="nearest",
                           seed=3)
        return FakeNNI(tuner, report, concurrency=8).run(proposals)

    monkeypatch.setattr(ConstrainedSpace, "sample_nearest", lost_every(3))
    assert len(run(40).proposed) == 40 and len(calls) >= 3
    monkeypatch.setattr(ConstrainedSpace, "sample_nearest", lost_every(1))
    calls.clear()
    with pytest.raises(SpaceError, match="no configuration"):
        run(8)
    assert len(calls) == RANDOM_TRIES  # drawn as many times as a tuner tries, then stopped
