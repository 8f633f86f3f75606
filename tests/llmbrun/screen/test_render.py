"""llmb.llmbrun.screen.render: the table llmb-run screen prints, the per-node plot (suspects
marked), and the newest screen in `llmb-run report` and `archive` (an install as real runs
leave it, tests/helpers/fakeinstall.py; verify-archive accepts the result)."""

from __future__ import annotations

import html
import json
import tarfile
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import screenfiles
from llmb import layout
from llmb.llmbrun.screen import baseline as screenbaseline
from llmb.llmbrun.screen import render as screenreport

SLOW = {"pairs-1:node2,node3": 0.01, "pairs-2:node1,node3": 0.012}


def test_table_names_the_suspect_with_its_figures(tmp_path):
    doc = screenfiles.screen_json(tmp_path, slow=SLOW)
    lines = screenreport.table(doc).splitlines()
    assert lines[0] == ("screen 20260102-030405 (job 9, COMPLETED): 4 node(s) x 2 task(s) on "
                        "the CPU (gloo), judged against their peers only; all-reduces measured "
                        "by torch.distributed (gloo)")
    assert lines[1].split() == ["node", "verdict", "GPUs", "matmul_fp32_tflops",
                                "min/median", "memory_gbps", "min/median", "all-reduce",
                                "busbw", "GB/s", "pairs", "busbw", "GB/s"]
    assert lines[4].split()[:2] == ["node3", "slow"]
    assert lines[4].endswith("0.01 (node2) 0.012 (node1)")
    assert "  node3: slow with every partner (node2, node1)" in lines
    assert "rounds: gpus 1.5 s, nodes 1.5 s, pairs-1 1.5 s, pairs-2 1.5 s, all 1.5 s" in lines
    assert lines[-1] == "suspects: node3"
    assert any(ln.startswith("  node3: pairs busbw_gbps 0.012 < floor 0.035") for ln in lines)


def test_table_says_what_the_screen_resolves(tmp_path):
    doc = screenfiles.screen_json(tmp_path, repeats=5)
    lines = screenreport.table(doc).splitlines()
    (line,) = [ln for ln in lines if ln.startswith("resolves: ")]
    for r in doc["resolution"]:
        assert f"a {100 * r['resolves']:.3g}% slow" in line
    assert "slow GPU memory_gbps (noise" in line and "slow link (noise" in line
    assert lines[-1] == "suspects: none"
    assert screenreport.resolution_line(screenfiles.screen_json(tmp_path / "old")) is None


def test_table_says_once_where_the_tiers_came_from(tmp_path):
    doc = screenfiles.screen_json(tmp_path)
    assert not any(ln.startswith("topology: ") for ln in screenreport.table(doc).splitlines())
    doc["topology"] = "one tier: Slurm gives no switch topology (no topology/tree plugin)"
    lines = screenreport.table(doc).splitlines()
    assert [ln for ln in lines if ln.startswith("topology: ")] == [
        "topology: one tier: Slurm gives no switch topology (no topology/tree plugin)"]


def test_plot_is_a_png(tmp_path):
    png = screenreport.plot_png(screenfiles.screen_json(tmp_path, slow=SLOW))
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = fakeinstall.make_install(tmp_path_factory.mktemp("i") / "llmb")
    fakeinstall.make_run(root, "14", workload="pretrain_nemotron4", size="15b", scale=16)
    screenfiles.screen_json(root, "20260101-000000")  # an older screen: not shown
    screenfiles.screen_json(root, slow=SLOW)
    return root


def test_report_shows_the_newest_screen(site, tmp_path):
    out = tmp_path / "report"
    proc = runinstall.run(["report", "--output", str(out)], site, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (f"report: includes the newest screen (20260102-030405, {site}/screens/"
            "20260102-030405)") in proc.stdout
    page = (out / "index.html").read_text()
    assert page.count("<h2>Cluster screen</h2>") == 1
    assert page.index("<h2>Cluster screen</h2>") < page.index("</body>")
    assert "suspects: <b>node3</b>" in page
    assert 'alt="screen per node" src="data:image/png;base64,' in page
    assert (out / "plots" / screenreport.PLOT_FILE).read_bytes().startswith(b"\x89PNG")
    markdown = (out / "report.md").read_text()
    assert "## Cluster screen" in markdown and "![screen per node](plots/screen.png)" in markdown
    assert "| node3 | slow |" in markdown


def test_archive_holds_the_newest_screen_and_verifies(site, tmp_path):
    archive = tmp_path / "a.tar.gz"
    proc = runinstall.run(["archive", "--output", str(archive)], site, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "  screen 20260102-030405: suspects node3" in proc.stdout
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        index = json.load(tar.extractfile("llmb-archive/ARCHIVE.json"))  # type: ignore[arg-type]
        doc = json.load(tar.extractfile("llmb-archive/screen/screen.json"))  # type: ignore[arg-type]
        page = tar.extractfile("llmb-archive/report/index.html").read().decode()  # type: ignore[union-attr]
    assert "llmb-archive/screen/screen-9.out" in names
    assert index["screen"] == {"stamp": "20260102-030405", "suspects": ["node3"],
                               "in_report": True}
    assert doc["suspects"] == ["node3"]
    assert "<h2>Cluster screen</h2>" in page
    check = runinstall.run(["verify-archive", str(archive)], tmp_path, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "complete and consistent" in check.stdout


def test_report_and_archive_carry_the_baseline_comparison(tmp_path):
    root = fakeinstall.make_install(tmp_path / "llmb")
    fakeinstall.make_run(root, "14", workload="pretrain_nemotron4", size="15b", scale=16)
    kept = screenbaseline.save(root / "screens" / "baseline.json",
                               screenfiles.screen_json(root, "20260101-000000", repeats=5))
    doc = screenfiles.screen_json(root, "20260102-030405", repeats=5)
    screenbaseline.apply(doc, kept, str(root / "screens" / "baseline.json"))
    (root / "screens" / doc["stamp"] / "screen.json").write_text(json.dumps(doc))
    line = screenreport.baseline_line(doc)
    assert line is not None and line.startswith(
        f"baseline 20260101-000000 ({root}/screens/baseline.json): now against then: ")
    out = tmp_path / "report"
    proc = runinstall.run(["report", "--output", str(out)], root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert html.escape(line) in (out / "index.html").read_text()
    assert f"- {line}" in (out / "report.md").read_text()
    archive = tmp_path / "a.tar.gz"
    proc = runinstall.run(["archive", "--output", str(archive)], root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(archive) as tar:
        held = json.load(tar.extractfile("llmb-archive/screen/baseline.json"))  # type: ignore[arg-type]
    assert held == kept
    check = runinstall.run(["verify-archive", str(archive)], tmp_path, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def test_report_before_any_run_holds_the_screen(tmp_path):
    root = fakeinstall.make_install(tmp_path / "llmb")  # installed, screened, nothing run
    doc = screenfiles.screen_json(root, repeats=5, slow=SLOW)
    out = root / "report"
    proc = runinstall.run(["report"], root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"report: {out}/index.html",
        f"report: includes the newest screen ({doc['stamp']}, {root}/screens/{doc['stamp']})",
        f"report: {out}/report.md",
        f"report: no runs yet under {root}/workloads: the report holds its sections"]
    page = (out / "index.html").read_text()
    assert "Logs: 0 (0 Success" in page and page.count("<h2>Cluster screen</h2>") == 1
    assert "suspects: <b>node3</b>" in page
    line = screenreport.resolution_line(doc)
    assert line is not None and html.escape(line) in page
    assert (out / "plots" / screenreport.PLOT_FILE).read_bytes().startswith(b"\x89PNG")
    assert f"- {line}" in (out / "report.md").read_text()
    assert not list(out.glob(".llmb-report-*"))  # nothing left of its making


def test_report_with_neither_runs_nor_a_screen_writes_nothing(tmp_path):
    root = fakeinstall.make_install(tmp_path / "llmb")
    (root / "workloads").mkdir()
    proc = runinstall.run(["report"], root, timeout=300)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"llmb-run: no runs yet: {root}/workloads holds no log\n"
    assert not (root / "report").exists()


def test_no_screen_no_section(tmp_path):
    assert screenreport.load_newest(layout.Install(tmp_path)) is None
    assert screenreport.add_to_report(tmp_path, layout.Install(tmp_path)) is None


def test_report_md_shows_screen_text_never_reads_it_as_markdown(tmp_path):
    doc = screenfiles.screen_json(tmp_path)
    doc["stamp"] = "x\n# forged heading\n![i](http://evil.example/x.png)"
    doc["suspects"] = ["<img src=x>", "a|b", "*bold*"]
    doc["nodes"][0]["node"] = "n`code`[l](http://e)"
    md = screenreport.markdown_section(doc, plot=True)
    assert "\n# forged" not in md and "![i]" not in md and "[l](" not in md
    assert " <img" not in md and "`code`" not in md and " *bold*" not in md
    assert "!\\[i\\](http://evil.example/x.png)" in md and "a\\|b" in md
    assert md.count("![screen per node](plots/screen.png)") == 1  # its own image alone


def test_the_report_says_so_when_matplotlib_is_absent(tmp_path, monkeypatch):
    import builtins

    root = fakeinstall.make_install(tmp_path / "llmb")
    screenfiles.screen_json(root)
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_text("# report\n")
    (out / "index.html").write_text("<html><body></body></html>")
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert screenreport.add_to_report(out, layout.Install(root)) == "20260102-030405"
    assert f"- {screenreport.NO_PLOT}" in (out / "report.md").read_text()
    assert html.escape(screenreport.NO_PLOT) in (out / "index.html").read_text()
    assert not (out / "plots").exists()
