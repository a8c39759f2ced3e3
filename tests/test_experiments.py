"""The checked-in experiment folders: regenerated identically, valid for NNI, tuners constructible."""
import filecmp
import json
from pathlib import Path

import pytest
import yaml
from nni.experiment.config import ExperimentConfig
from nni.tools.package_utils.tuner_factory import create_builtin_class_instance, create_customized_class_instance

from experiments import registry, write
from trial.workload import parse

FOLDERS = sorted(p.parent for p in write.EXPERIMENTS.glob("*/*/search_space.json"))
STUDY = {"mm/N512K1024M1024", "mm/N512K1024M4096", "mm/N512K4096M1024", "bmm/B960N128K128M64PNN",
         "bmm/B960N128K128M64PTN", "bmm/B960N128K64M128PNT", "conv/N512C3HW227F64K11ST4PD0",
         "conv/N512C64HW27F192K5ST1PD2"}


def test_the_study_is_checked_in():
    assert {f"{p.parent.name}/{p.name}" for p in FOLDERS} >= STUDY


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_folder_regenerates_identically(folder, tmp_path):
    """Only the code-directory paths, relative to where the folder lies, may differ.  The checked-in
    folders keep the rules of whichever device runs them (`--arch auto`)."""
    regenerated = write.write(parse(folder.parent.name, folder.name), tmp_path, arch="auto")
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(p.name for p in regenerated.iterdir())
    for name in names:
        if name.endswith(".yml"):
            mine, fresh = (yaml.safe_load((d / name).read_text()) for d in (folder, regenerated))
            for config in (mine, fresh):
                config.pop("trialCodeDirectory"), config["tuner"].pop("codeDirectory", None)
            assert mine == fresh, name
        else:
            assert filecmp.cmp(folder / name, regenerated / name, shallow=False), name


@pytest.mark.parametrize("config", sorted(p for f in FOLDERS for p in f.glob("config_*.yml")),
                         ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_config_is_valid_for_nni_and_its_tuner_starts(config):
    """NNI accepts the config, and its tuner (built as NNI's dispatcher builds it) takes the space."""
    loaded = ExperimentConfig.load(config)
    loaded.validate()
    canonical = loaded.canonical_copy()
    assert Path(canonical.trial_code_directory) == write.ROOT
    algo = canonical.tuner
    twin = Path(canonical.search_space_file).name == "search_space_twin.json"
    assert twin == (config.stem.removeprefix("config_") in registry.BUILTIN_TUNERS)
    if algo.name:  # an NNI built-in
        tuner = create_builtin_class_instance(algo.name, algo.class_args, "tuners")
    else:
        assert Path(algo.code_directory) == write.ROOT
        tuner = create_customized_class_instance({"codeDirectory": algo.code_directory,
                                                  "className": algo.class_name, "classArgs": algo.class_args})
    tuner.update_search_space(json.loads(Path(canonical.search_space_file).read_text()))
    tuner_name = config.stem.removeprefix("config_")
    op, spec = config.parent.parent.name, config.parent.name
    assert canonical.trial_command == f"python3 -m trial {op} {spec} --tuner {tuner_name}"
