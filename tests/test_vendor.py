"""The vendor baselines (trial.vendor, benchmarks.vendor) where there is no GPU: no figure, and the command says why."""
import sys

import pytest

from benchmarks import vendor
from trial.vendor import baseline
from trial.workload import parse


def test_vendor_baseline_only_on_cuda():
    wl = parse("mm", "N32K32M32")
    assert baseline(wl, "llvm") is None and baseline(wl, "") is None


def test_vendor_command_says_why_it_has_no_figure(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without PyTorch: `import torch` fails
    assert vendor.main(["conv/N8C3HW16F4K3ST1PD1", "--cudnn-heuristics"]) == 1
    assert "conv/N8C3HW16F4K3ST1PD1: no vendor figure (it needs PyTorch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        vendor.main(["conv/N8C3HW16"])
    assert "N8C3HW16" in capsys.readouterr().err
