"""The benchmark protocol's published results: its report as a generated section of a page, and its plots."""
import json

from benchmarks import protocol, protocol_publish, protocol_run

TINY = "mm/N32K32M32"


def test_publish_writes_the_report_into_the_page_and_replaces_it_the_next_time(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(protocol_run, "baseline", lambda wl, target, repeat, min_repeat_ms, compile_mode=None: {
        "library": "fake BLAS", "gflops": 2.0, "latency_ms": 1.0, "compile_s": 1.0})
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text("# Results\n\nWritten by hand.\n\n## A measured section\n\nIts table.\n")
    command = ["--workloads", TINY, "--tuners", "opevo", "random", "--seeds", "2", "--trials", "3", "--target", "llvm",
               "--min-repeat-ms", "1", "--out", str(tmp_path / "out"), "--no-progress", "--publish", str(page)]
    assert protocol.main(command) == 0
    first = page.read_text()
    assert first.startswith(f"# Results\n\n{protocol_publish.BEGIN}\n\n## Benchmark protocol\n")
    assert "### given" in first and f"| {TINY} | given on the command line | opevo | 2 |" in first
    assert first.count(protocol_publish.BEGIN) == first.count(protocol_publish.END) == 1
    assert first.endswith(f"{protocol_publish.END}\n\nWritten by hand.\n\n## A measured section\n\nIts table.\n")
    plots = sorted(p.name for p in (page.parent / "protocol").iterdir())
    assert plots == ["given-ratio.png", "given-vs-seconds.png", "given-vs-trials.png"]
    assert all((page.parent / "protocol" / name).read_bytes()[:4] == b"\x89PNG" for name in plots)
    assert "![given-ratio](protocol/given-ratio.png)" in first
    assert "wrote the report into" in capsys.readouterr().err

    record = next((tmp_path / "out").rglob("opevo-*-s0.json"))
    changed = {**json.loads(record.read_text()), "best_gflops": 123456.0}
    record.write_text(json.dumps(changed))
    assert protocol.main(command) == 0
    second = page.read_text()
    assert second.count(protocol_publish.BEGIN) == 1 and "123456.0" in second and "Written by hand." in second
    assert second.split(protocol_publish.END)[1] == first.split(protocol_publish.END)[1]


def test_a_run_without_a_vendor_figure_has_no_ratio_plot(tmp_path):
    curve = [[1, 0.5, "ok", 10.0], [2, 1.0, "compile_error", 0.0], [3, 2.0, "ok", 30.0]]
    records = {"study": {TINY: [{"tuner": "opevo", "seed": 0, "curve": curve, "ratio": None, "vendor": None}]}}
    written = protocol_publish.plots(records, tmp_path)
    assert [p.name for p in written] == ["study-vs-trials.png", "study-vs-seconds.png"]
    assert protocol_publish._curve(records["study"][TINY][0], None) == [10.0, 10.0, 30.0]
    at = protocol_publish._curve(records["study"][TINY][0], __import__("numpy").array([0.0, 0.5, 1.5, 2.0]))
    assert at == [0.0, 10.0, 10.0, 30.0]
