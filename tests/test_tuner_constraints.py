"""With a target, every suite tuner proposes only kernels the device can run (issue: most of a GPU
kernel's factor space is beyond its limits, and tuners used to spend their budgets there)."""
import zlib

import pytest
from tuner_harness import INVALID, FakeNNI, make_tuner, no_checkpoint_dir, ok  # noqa: F401

from searchspace import ConstrainedSpace
from trial import check, templates
from trial.archs import target_of
from trial.workload import parse
from tuners.gbfs import GBFSTuner
from tuners.na2c import NA2CTuner
from tuners.opevo import OpEvoTuner

STUDY = ["mm/N512K1024M1024", "mm/N512K1024M4096", "mm/N512K4096M1024", "bmm/B960N128K128M64PNN",
         "bmm/B960N128K128M64PTN", "bmm/B960N128K64M128PNT", "conv/N512C3HW227F64K11ST4PD0",
         "conv/N512C64HW27F192K5ST1PD2"]
AWKWARD = ["mm/N768K3072M768PTN", "mm/N1000K197M49", "mm/N49K1000M3072PNT", "bmm/B1N197K64M197PTT",
           "conv/N1C3HW224F64K7ST2PD3"]
TUNERS = [OpEvoTuner, GBFSTuner, NA2CTuner]
PROPOSALS = 500


def kernel_speed(name, arch):
    """A stand-in for a GPU run: `invalid` where the trial's knob check refuses the kernel, else a speed
    that depends on the configuration (so the tuners have something to climb)."""
    op, spec = name.split("/")
    wl, template, target = parse(op, spec), templates.load(op), target_of(arch)

    def report(config):
        try:
            check.check(wl, template, config, target)
        except check.InvalidConfig:
            return INVALID
        return ok(1.0 + zlib.crc32(repr(sorted(config.items())).encode()) % 1000)

    return wl, template, report


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("name", STUDY + AWKWARD)
@pytest.mark.parametrize("cls", TUNERS, ids=lambda c: c.__name__)
def test_every_proposal_is_a_kernel_the_device_runs(cls, name, arch):
    wl, template, report = kernel_speed(name, arch)
    tuner = make_tuner(cls, template.search_space(wl), workload=name, target=arch, seed=1)
    assert isinstance(tuner.space, ConstrainedSpace)
    run = FakeNNI(tuner, report, concurrency=8).run(PROPOSALS)
    failed = sum(outcome is None for outcome in run.outcomes)
    assert len(run.proposed) == PROPOSALS
    assert failed <= 0.01 * PROPOSALS, f"{failed} of {PROPOSALS} proposals broke the device's rules"
