"""The templates' rules on a device (trial/constraints.py), and the constrained spaces they make."""
import json
import random

import pytest
from nni.algorithms.hpo.random_tuner import RandomTuner
from test_trial import GPU

from searchspace import ConstrainedSpace, SearchSpace, from_twin, twin_space
from trial import check, templates
from trial.archs import ARCHS, UnknownArch, target_of
from trial.constraints import KernelRules
from trial.workload import parse

SHAPES = [("mm", "N512K1024M1024"), ("mm", "N768K3072M768PTN"), ("mm", "N1000K49M1000PNT"),
          ("bmm", "B960N128K64M128PNT"), ("bmm", "B1N197K64M197PTT"),
          ("conv", "N512C3HW227F64K11ST4PD0"), ("conv", "N1C3HW224F64K7ST2PD3")]


def rules(op, spec, target=GPU):
    wl = parse(op, spec)
    template = templates.load(wl)
    return wl, template, KernelRules(wl, template, target)


@pytest.mark.parametrize("op,spec", SHAPES)
def test_the_rules_are_the_knob_check(op, spec):
    """A configuration keeps the rules exactly when the trial's knob check accepts it, and each broken
    rule is one of the check's reasons."""
    wl, template, kernel = rules(op, spec)
    space, rng = SearchSpace.from_json(template.search_space(wl)), random.Random(5)
    seen = {True: 0, False: 0}
    for _ in range(300):
        config = space.sample(rng)
        problems = kernel.problems(config)
        assert (kernel.excess(config) == 0) == (not problems)
        try:
            check.check(wl, template, config, GPU)
        except check.InvalidConfig as err:
            assert problems and all(p in str(err) for p in problems), (config, problems, err)
            seen[False] += 1
        else:
            assert not problems, (config, problems)
            seen[True] += 1
    assert seen[True] and seen[False]


@pytest.mark.parametrize("op,spec", SHAPES)
def test_possible_keeps_every_value_of_a_valid_configuration(op, spec):
    """Values are ruled out only when no valid configuration has them: every value of the valid configurations
    among 30,000 drawn from the plain space (hundreds, where one draw in a hundred is valid) is kept."""
    wl, template, kernel = rules(op, spec)
    space, rng, valid = SearchSpace.from_json(template.search_space(wl)), random.Random(3), 0
    for _ in range(30_000):
        config = space.sample(rng)
        if kernel.excess(config) == 0:
            valid += 1
            assert all(kernel.possible(name, value) for name, value in config.items()), config
    assert valid >= 100


def test_vector_loads_must_fit_the_tiles():
    wl, template, kernel = rules("mm", "N512K1024M1024")
    config = {**template.default_params(wl, True), "K": [1, 512, 1, 2], "vec": 4}
    assert "vec 4 does not divide A's contiguous tile extent 2 and row of 1024" in kernel.problems(config)
    assert not kernel.problems({**config, "vec": 2})


@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "sm_75"])
@pytest.mark.parametrize("op,spec", SHAPES)
def test_constrained_spaces_hand_out_only_kernels_the_check_accepts(arch, op, spec):
    wl, template, kernel = rules(op, spec, target_of(arch))
    space = ConstrainedSpace.of(SearchSpace.from_json(template.search_space(wl)), kernel)
    rng = random.Random(11)
    for _ in range(100):
        config = space.sample(rng)
        check.check(wl, template, config, target_of(arch))
        for near in rng.sample(space.neighbours(config), 3):
            check.check(wl, template, near, target_of(arch))


def test_architectures_of_absent_gpus():
    assert target_of("sm_90").async_copy and not target_of("sm_75").async_copy
    assert target_of("gfx90a").limits.warp_size == 64 and not target_of("llvm").is_gpu
    assert set(ARCHS) >= {"sm_80", "sm_89", "sm_90", "llvm"}
    with pytest.raises(UnknownArch, match="unknown --arch 'sm_1'"):
        target_of("sm_1")


def random_proposals(wl, template, target, count):
    """NNI's Random over the unrestricted twin of `template`'s space (what an `--arch auto` experiment gives it):
    (proposal, the configuration it decodes to on `target`, the configuration it names, how far beyond the
    device's limits that is), each decoded configuration checked to be one the knob check accepts."""
    space = SearchSpace.from_json(template.search_space(wl))
    kernel = KernelRules(wl, template, target)
    tuner = RandomTuner(seed=4)
    tuner.update_search_space(twin_space(space))
    for pid in range(count):
        proposal = json.loads(json.dumps(tuner.generate_parameters(pid)))
        config = check.decode(wl, template, proposal, target)
        check.check(wl, template, config, target)
        named = from_twin(space, proposal)
        yield proposal, config, named, kernel.excess(named)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("op,spec", SHAPES)
def test_twin_proposals_stand_for_kernels_the_device_runs(arch, op, spec):
    """Every proposal decodes to a configuration the knob check accepts; one that keeps the rules is measured
    as proposed, and the same proposal always stands for the same kernel."""
    target = target_of(arch)
    wl, template, _ = rules(op, spec, target)
    repaired = 0
    for proposal, config, named, excess in random_proposals(wl, template, target, 150):
        assert check.decode(wl, template, proposal, target) == config
        if excess == 0:
            assert config == named
        else:
            repaired += 1
    assert repaired  # the twin alone breaks the rules: the test exercises the repair


@pytest.mark.parametrize("op,spec", [("mm", "N512K1024M1024"), ("mm", "N512K1024M1024PNT_i8"),
                                     ("conv", "N32C64HW56F64K3ST1PD1_f16"), ("conv", "N32C64HW56F256K1ST1PD0_f16")])
def test_twin_proposals_over_plain_choices_are_repaired_too(op, spec):
    """The Hopper templates' knobs are plain choices (simt for float32, wgmma for the tensor-core types and for
    16-bit convolutions, as a matmul or an implicit GEMM), so their twin reads as native but for its marker: a
    proposal of NNI's Random that breaks the rules stands for the nearest kernel that keeps them, the same
    values given natively are judged as they are."""
    target = target_of("sm_90")
    wl = parse(op, spec)
    template = templates.load(wl, target=target)
    repaired = 0
    for _, config, named, excess in random_proposals(wl, template, target, 60):
        if excess > 0:
            repaired += 1
            assert config != named and check.decode(wl, template, named, target) == named
    assert repaired > 10, repaired


def test_native_configurations_are_judged_as_they_are():
    """The suite's tuners and `--params` give native configurations: one beyond the device is not repaired."""
    wl, template, kernel = rules("mm", "N512K1024M1024")
    too_big = {**template.default_params(wl, True), "X": [1, 1, 32, 16], "Y": [1, 1, 64, 16]}
    assert kernel.excess(too_big) > 0
    assert check.decode(wl, template, too_big, GPU) == too_big
    with pytest.raises(check.InvalidConfig, match="threads per block"):
        check.check(wl, template, too_big, GPU)
