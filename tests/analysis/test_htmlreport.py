"""--report=DIR (llmb.analysis.htmlreport, llmb.analysis.plots): the files, a page that needs
nothing outside itself, escaping, matplotlib kept off the plain path, and the page rendered in a
real headless browser (Debian's chromium) whose screenshot must show non-blank plots."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from analyzercli import run_analyzer
from paths import LOGS, REPO

VERDICTS, BASELINE = LOGS / "verdicts", LOGS / "baseline"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Debian's chromium as root, offline (DEVELOPERS.md: without these it stalls on lookups).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--force-device-scale-factor=1", "--virtual-time-budget=10000")
WIDTH = 1400


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_analyzer(args, timeout=300)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "nested" / "report"
    proc = cli("--format=json", f"--report={out}", f"--baseline={BASELINE}", str(VERDICTS))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"parse_train_timing.sh: report written to {out}/index.html"
    json.loads(proc.stdout)  # stdout stays pure JSON
    return out


def test_files_one_plot_per_family(report: Path) -> None:
    plots = sorted(p.name for p in (report / "plots").iterdir())
    assert "llama3.1-8b-fp8-h100-weak.png".replace("-", "_") in plots
    assert all(p.endswith(".png") for p in plots)
    assert len(plots) == 11  # families of the fixtures' identified configurations
    for p in (report / "plots").iterdir():
        assert p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert not [p for p in report.rglob(".*")]  # no temporary files left behind


def test_the_page_needs_nothing_outside_itself(report: Path) -> None:
    page = (report / "index.html").read_text()
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert not re.search(r"""(?:src|href)\s*=\s*(?!["']?data:)""", page, re.I)
    assert not re.search(r"url\(|@import|https?://", page, re.I)
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    files = {p.read_bytes() for p in (report / "plots").iterdir()}
    assert len(images) == len(files) and {base64.b64decode(i) for i in images} == files


def test_the_page_has_every_section(report: Path) -> None:
    page = (report / "index.html").read_text()
    for heading in ("Verdicts", "Plots", "Compared with the baseline",
                    "Runs that failed or need a look", "Where the references come from"):
        assert f"<h2>{heading}</h2>" in page
    assert "no_successful_run" in page and "below" in page
    assert "Node failure on nid001703" in page and "nid001812" in page
    assert "seed 003" in page  # the provenance of the Llama 3.1 references


def test_markdown_report(report: Path) -> None:
    md = (report / "report.md").read_text()
    assert md.startswith("# llmb benchmark report\n")
    assert "| llama3.1 8b bf16 16gpu | 2/2 | 13.820 |" in md
    for png in (report / "plots").iterdir():
        assert f"](plots/{png.name})" in md
    assert "## Compared with the baseline" in md


def test_names_and_reasons_are_escaped(tmp_path: Path) -> None:
    hostile = '<img src=x onerror=alert(1)>|"pipe'
    src = next((VERDICTS / "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128")
               .rglob("log-*.out"))
    log = tmp_path / "runs" / hostile / "log-x_1_0.out"
    log.parent.mkdir(parents=True)
    shutil.copy(src, log)
    with log.open("a") as f:  # an error after the last step: the run's reason quotes it
        f.write("RuntimeError: <script>alert(1)</script> | a pipe\n")
    out = tmp_path / "rep"
    assert cli(f"--report={out}", str(tmp_path / "runs")).returncode == 0
    page = (out / "index.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    md = (out / "report.md").read_text()
    assert "\\| a pipe" in md and "|&quot;" not in md
    # a markdown viewer renders raw HTML: report.md escapes it as index.html does
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert "<img src=x" not in md and "&lt;img src=x" in md


def test_plain_analysis_never_imports_matplotlib() -> None:
    probe = subprocess.run(
        [sys.executable, "-c",
         "import io, sys, contextlib; from llmb.analysis import cli\n"
         "with contextlib.redirect_stdout(io.StringIO()):\n"
         f"    cli.main(['--format=json', {str(VERDICTS)!r}])\n"
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'PIL', "
         "'numpy')))"],
        env={**os.environ, "PYTHONPATH": str(REPO / "common")}, capture_output=True, text=True,
        check=True)
    assert probe.stdout.strip() == "[]"


def test_an_existing_file_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("mine\n")
    proc = cli(f"--report={tmp_path / 'taken'}", str(VERDICTS))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--report=" in proc.stderr and "exists and is not a directory" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["taken"]


# --- a real browser ---------------------------------------------------------------------------

INSTRUMENT = """<script>
window.addEventListener('load', () => {
  const rects = [...document.images].map(i => { const b = i.getBoundingClientRect();
    return [b.left, b.top + window.scrollY, b.width, b.height, i.naturalWidth, i.complete]; });
  document.body.setAttribute('data-rects', JSON.stringify(rects));
  document.body.setAttribute('data-height', document.documentElement.scrollHeight);
});
</script>"""


def chromium(tmp: Path, *args: str) -> str:
    proc = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}",
                           *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install "
                    "chromium; .ci/run installs it): the report is not checked in a browser")
def test_the_report_renders_with_non_blank_plots(report: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    # A copy of the page that reports where its images landed; the layout is the page's own.
    page = (report / "index.html").read_text()
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", INSTRUMENT + "</body>"))
    dom = chromium(tmp_path, f"--window-size={WIDTH},1000", "--dump-dom", probe.as_uri())
    rects = json.loads(re.search(r'data-rects="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    height = int(re.search(r'data-height="(\d+)"', dom).group(1))
    assert len(rects) == len(list((report / "plots").iterdir()))
    assert all(natural > 0 and complete for *_, natural, complete in rects)  # decoded

    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--window-size={WIDTH},{height}", f"--screenshot={shot}",
             probe.as_uri())
    image = Image.open(shot).convert("L")
    assert image.size == (WIDTH, height)
    for left, top, width, h, *_ in rects:
        assert width > 600 and h > 150
        box = (int(left) + 2, int(top) + 2, int(left + width) - 2, int(top + h) - 2)
        region = image.crop(box)
        stats = ImageStat.Stat(region)
        # A blank (or failed) image is one flat colour; a plot has axes, text, lines, markers.
        assert stats.stddev[0] > 20, f"plot at {box} looks blank (stddev {stats.stddev[0]:.1f})"
        assert len(region.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 16
    margin = image.crop((0, height - 20, WIDTH, height))  # the page's own background: flat
    assert ImageStat.Stat(margin).stddev[0] < 5


@pytest.mark.parametrize("text", ["8b$", r"$\frac{", "$x^$", "a $$ b", r"\$"])
def test_a_value_with_dollars_is_drawn_as_written(text: str) -> None:
    """matplotlib reads $...$ in a title as math; a value from a manifest must not end the
    whole figure in a ValueError."""
    from llmb.analysis import plots

    key = ("llama3.1", text, "fp8", "h100", f"weak {text}", False)
    config = {"recipe": "llama3.1", "num_gpus": 8, "time_median": 1.0, "time_min": 1.0,
              "time_max": 1.0, "config_key": "k", "reference_step_time": 1.0,
              "mfu_median": 0.3}
    assert plots.figure_png(key, [config], {"k": [1.0]}, 5).startswith(b"\x89PNG")
