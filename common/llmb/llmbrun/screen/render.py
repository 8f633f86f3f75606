"""A screen for people: the table `llmb-run screen` prints, and the section `llmb-run report`
and `archive` add to the analyzer's report (a per-node plot with the suspects marked, the
verdicts and what was named), for the newest screen of the install.

The plot has one panel per figure against the nodes, in name order: each GPU's matrix
multiply and memory bandwidth (a dot per GPU), and each node's own all-reduce bus bandwidth
(a square) with its pairs' (dots); the floor each was held to where an expectation applies
(dashed), the peers' median (dotted); suspects' names in red on a shaded band. matplotlib is
imported inside the functions.
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmb import layout
from llmb.llmbrun.screen import confirm, stragglers
from llmb.llmbrun.screen.document import Named, ScreenDocument, Straggler
from llmb.llmbrun.screen.suspects import newest_screen
from llmb.shared import values
from llmb.shared.files import atomic_write

PLOT_FILE = "screen.png"
SECTION_TITLE = "Cluster screen"
COLOURS = {"gpu": "#1f5fa8", "node": "#15803d", "pair": "#9aa5b1", "suspect": "#b91c1c",
           "band": "#fee2e2", "floor": "#c2410c", "median": "#6b7280"}


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def gpu_figures(doc: ScreenDocument) -> list[str]:
    return sorted({f for n in doc["nodes"] for g in n["gpus"] for f in g["figures"]})


def headline(doc: ScreenDocument) -> str:
    mode = ("on the CPU (gloo), judged against their peers only" if doc["mode"] == "cpu"
            else f"on {doc['gpu_type']} GPUs, judged against gpus.yaml and their peers")
    return (f"screen {doc.get('stamp', '?')} (job {doc.get('job_id', '?')}, "
            f"{doc.get('job_state', '?')}): {len(doc['nodes'])} node(s) x "
            f"{doc['gpus_per_node']} task(s) {mode}; all-reduces measured by "
            f"{doc['measured_by']} ({doc['backend']})")


def node_rows(doc: ScreenDocument) -> tuple[list[str], list[list[str]]]:
    figures = gpu_figures(doc)
    head = ["node", "verdict", "GPUs", *(f"{f} min/median" for f in figures),
            "all-reduce busbw GB/s", "pairs busbw GB/s"]
    rows = []
    for node in doc["nodes"]:
        cells = [node["node"], str(node["verdict"]), str(len(node["gpus"]))]
        for figure in figures:
            got = sorted(g["figures"][figure] for g in node["gpus"] if figure in g["figures"])
            cells.append(f"{_num(got[0])}/{_num(got[len(got) // 2])}" if got else "-")
        cells.append(_num((node.get("allreduce") or {}).get("busbw_gbps")))
        cells.append(" ".join(f"{_num(p['busbw_gbps'])} ({p['with']})" for p in node["pairs"])
                     or "-")
        rows.append(cells)
    return head, rows


def named_lines(doc: ScreenDocument, entries: Sequence[Named] | None = None) -> list[str]:
    """What was named (or `entries`), a line each: the figure against its floor, and what
    the confirm pass measured of it again."""
    out = []
    for n in doc["named"] if entries is None else entries:
        if n.get("figure") is None:
            out.append(f"{n['name']}: {n['why']}")
            continue
        if n.get("value") is None:  # a fact, not a figure: health, transport
            out.append(f"{n['name']}: {n['figure']}: {n['why']}")
            continue
        out.append(f"{n['name']}: {n['figure']} {_num(n['value'])} < floor {_num(n.get('floor'))}"
                   f" (peers' median {_num(n.get('peers_median'))}"
                   + (f", expected {_num(n['expected'])}" if n.get("expected") else "")
                   + (f"; the confirm pass: {_num(n['again'])}" if n.get("again") is not None
                      else "")
                   + f"): {n['why']}")
    return [values.shown(line) for line in out]


def confirm_line(doc: ScreenDocument) -> str | None:
    """The confirm pass in one line: where it measured, what it cleared; None without one."""
    info = doc.get("confirm")
    if not isinstance(info, dict):
        return None
    where = (f"confirm pass on {len(info['nodes'])} node(s) ({', '.join(info['nodes'])}; "
             f"healthy peers {', '.join(info['peers']) or 'none'})" if info["nodes"]
             else "confirm pass")
    if info.get("error"):
        return f"{where}: no verdict, the first pass's names stand: {info['error']}"
    cleared = ", ".join(f"{c['name']} {c.get('figure')}" for c in info["cleared"])
    return (f"{where}: measured {info['measured']} named figure(s) again; "
            + (f"{confirm.CLEARED}: {cleared}" if cleared else "every one slow again"))


def cleared_lines(doc: ScreenDocument) -> list[str]:
    """What the first pass named and the confirm pass cleared, a line each."""
    info = doc.get("confirm")
    entries = info["cleared"] if isinstance(info, dict) else []
    return [f"{line} [{confirm.CLEARED}]" for line in named_lines(doc, entries)]


KIND_WORDS = {"gpu": "GPU", "node": "node all-reduce", "link": "link",
              "network": "node network"}


def resolution_line(doc: ScreenDocument) -> str | None:
    """The smallest slowdown the screen would have named (95 %), per figure, from the noise
    its repeats showed; None for a screen without repeats."""
    found = [r for r in doc.get("resolution") or [] if isinstance(r, dict)]
    if not found:
        return None
    parts = []
    for r in found:
        what = KIND_WORDS.get(str(r.get("kind")), str(r.get("kind")))
        name = f" {r['figure']}" if r.get("kind") == "gpu" else ""
        parts.append(f"a {_pct(r.get('resolves'))} slow {what}{name} "
                     f"(noise {_pct(r.get('noise'))}/repeat, {r.get('repeats')} repeats)")
    return "resolves: " + "; ".join(parts)


def baseline_line(doc: ScreenDocument) -> str | None:
    """The screen against the cluster's baseline, in one line; None without one."""
    base = doc.get("baseline")
    if not isinstance(base, dict):
        return None
    what = f"baseline {base.get('screen') or '?'} ({base.get('path')})"
    if not base.get("comparable"):
        return f"{what}: not compared: {base.get('why_not')}"
    figures = [f for f in base.get("figures") or [] if isinstance(f, dict)]
    ratios = ", ".join(f"{f['figure']} x{f['ratio']:.3g}" + (" DROPPED" if f.get("dropped")
                                                              else "")
                       + (f" (resolves {_pct(f['resolves'])} on one {f.get('kind')})"
                          if isinstance(f.get("resolves"), (int, float)) else "")
                       for f in figures)
    changed = "; ".join(base.get("changed") or []) or "nothing it records"
    return f"{what}: now against then: {ratios or 'no figure in common'}; changed: {changed}"


def transport_line(doc: ScreenDocument) -> str | None:
    """Which network NCCL used between the nodes, grouped: None on the CPU."""
    found = doc.get("transport")
    if not isinstance(found, dict) or not found:
        return None
    by_kind: dict[str, list[str]] = {}
    for node, entry in found.items():
        by_kind.setdefault(str((entry or {}).get("transport")), []).append(node)
    return "network between nodes (NCCL): " + "; ".join(
        f"{kind} on {len(nodes)} node(s)" + (f" ({', '.join(nodes)})" if len(nodes) <= 8 and
                                             len(by_kind) > 1 else "")
        for kind, nodes in sorted(by_kind.items(), key=lambda kv: -len(kv[1])))


def _pct(value: object) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{100 * value:.3g}%"


def stragglers_line(doc: ScreenDocument) -> str | None:
    """Each figure's slowest element, its distance from the median, and whether beyond the
    acceptance's tolerance (llmb.llmbrun.screen.stragglers); None where none is listed."""
    found = doc.get("stragglers") or []
    firsts: dict[str, Straggler] = {}
    for s in found:
        firsts.setdefault(f"{s['kind']} {s['figure']}", s)
    if not firsts:
        return None
    beyond = sum(1 for s in found if s["beyond"])
    return (f"slowest (beyond {stragglers.ACCEPTANCE:.0%} below the median: {beyond}): "
            + "; ".join(f"{s['figure']} {s['element']} {_pct(s['below'])} below"
                        + (" BEYOND" if s["beyond"] else "") for s in firsts.values()))


def extra_lines(doc: ScreenDocument) -> list[str]:
    """What the screen says beyond its figures: resolution, transport, baseline, the
    slowest of each figure."""
    return [ln for ln in (resolution_line(doc), transport_line(doc), baseline_line(doc),
                          stragglers_line(doc), confirm_line(doc),
                          topology_line(doc)) if ln]


def topology_line(doc: ScreenDocument) -> str:
    """Where each node's leaf switch came from, or why the pairs are one tier."""
    return f"topology: {doc['topology']}" if doc.get("topology") else ""


def rounds_line(doc: ScreenDocument) -> str:
    return "rounds: " + ", ".join(f"{r['name']} {r['wall_s']:.1f} s" for r in doc["rounds"])


def table(doc: ScreenDocument) -> str:
    head, rows = node_rows(doc)
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    lines = [headline(doc),
             "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    for node in doc["nodes"]:
        lines += [f"  {node['node']}: {values.shown(r)}" for r in node["reasons"]]
    lines.append(rounds_line(doc))
    if everyone := doc.get("all_nodes"):
        lines.append(f"all nodes: busbw {_num(everyone.get('busbw_gbps'))} GB/s"
                     + (f" ({everyone['error']})" if everyone.get("error") else ""))
    links = [f"{' - '.join(p['nodes'])} (round {p['round']}): {p['verdict']}"
             for p in doc["pairs"] if p["verdict"] != "pass"]
    if links:
        lines.append("pairs below par: " + "; ".join(links))
    lines += extra_lines(doc)
    if doc["named"]:
        lines += ["named:", *(f"  {line}" for line in named_lines(doc))]
    if cleared := cleared_lines(doc):
        lines += ["seen once, not named:", *(f"  {line}" for line in cleared)]
    lines.append(f"suspects: {','.join(doc['suspects']) or 'none'}")
    return "\n".join(values.shown(line) for line in lines)  # names and words from the job


# --- the plot ---------------------------------------------------------------------------------

# Beyond this many nodes only the suspects get a name under the axis (thousands of labels
# cannot be read, and cost matplotlib minutes).
LABELLED_NODES = 128


def _mark_suspects(ax: Any, names: Sequence[str], suspects: set[str]) -> None:
    for i, name in enumerate(names):
        if name in suspects:
            ax.axvspan(i - 0.45, i + 0.45, color=COLOURS["band"], zorder=0)
    shown = [(i, n) for i, n in enumerate(names)
             if len(names) <= LABELLED_NODES or n in suspects][:LABELLED_NODES]
    ax.set_xticks([i for i, _ in shown], [n for _, n in shown],
                  rotation=90 if len(names) > 8 else 0, fontsize=8 if len(names) <= 64 else 5)
    for label in ax.get_xticklabels():
        if label.get_text() in suspects:
            label.set_color(COLOURS["suspect"])
            label.set_fontweight("bold")


def _floor_lines(ax: Any, doc: ScreenDocument, figure: str, points: Sequence[float]) -> None:
    import numpy as np

    expected = (doc.get("expectations") or {}).get(figure)
    if expected:
        ax.axhline(expected["floor"], color=COLOURS["floor"], linestyle="--",
                   label=f"floor ({expected['expected']:g} less {expected['tolerance']:.0%})")
    if points:
        ax.axhline(float(np.median(points)), color=COLOURS["median"], linestyle=":",
                   label="median")


def plot_png(doc: ScreenDocument) -> bytes:
    """The per-node figure as PNG bytes. Text from the record (a node's name, the stamp, a
    figure's name) is drawn as written: never read as matplotlib's $...$ math."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        return _plot_png(doc)


def _plot_png(doc: ScreenDocument) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [values.shown(n["node"]) for n in doc["nodes"]]  # drawn escaped, as printed
    figures = gpu_figures(doc)
    width = max(6.0, min(24.0, 0.3 * len(names) + 4))
    fig = Figure(figsize=(width, 2.6 * (len(figures) + 1)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(figures) + 1, 1, sharex=True, squeeze=False)[:, 0]
    bad = {values.shown(name) for name in doc["suspects"]}
    fig.suptitle(values.shown(f"llmb screen {doc.get('stamp', '')}: suspects "
                              f"{', '.join(doc['suspects']) or 'none'}"), fontsize=11,
                 fontweight="bold")
    for ax, figure in zip(axes, figures, strict=False):
        xs, ys, colours = [], [], []
        for i, node in enumerate(doc["nodes"]):
            for gpu in node["gpus"]:
                if figure in gpu["figures"]:
                    xs.append(i)
                    ys.append(gpu["figures"][figure])
                    colours.append(COLOURS["suspect"] if gpu.get("verdict") != "pass"
                                   else COLOURS["gpu"])
        ax.scatter(xs, ys, s=14, c=colours, zorder=3, label="each GPU")
        _floor_lines(ax, doc, figure, ys)
        ax.set_ylabel(values.shown(figure), fontsize=8)
    ax = axes[-1]
    pairs = [(i, p["busbw_gbps"]) for i, n in enumerate(doc["nodes"]) for p in n["pairs"]
             if p.get("busbw_gbps") is not None]
    if pairs:
        ax.scatter(*zip(*pairs, strict=True), s=14, color=COLOURS["pair"], zorder=3,
                   label="its pairs")
    own = [(i, busbw) for i, n in enumerate(doc["nodes"])
           if (busbw := (n.get("allreduce") or {}).get("busbw_gbps")) is not None]
    if own:
        ax.scatter(*zip(*own, strict=True), s=30, marker="s", color=COLOURS["node"],
                   zorder=4, label="the node's own")
    _floor_lines(ax, doc, "nvlink_busbw_gbps", [y for _, y in own])
    ax.set_ylabel("all-reduce busbw GB/s", fontsize=8)
    for ax in axes:
        _mark_suspects(ax, names, bad)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()


# --- in the report ----------------------------------------------------------------------------

def load_newest(tree: layout.Install) -> tuple[Path, ScreenDocument] | None:
    """The newest complete screen of the install and its results (checked), or None."""
    screen = newest_screen(tree)
    return None if screen is None else (screen.path, screen.doc)


def html_section(doc: ScreenDocument, png: bytes | None) -> str:
    head, rows = node_rows(doc)
    notes = [rounds_line(doc), *extra_lines(doc)]
    parts = [f"<h2>{SECTION_TITLE}</h2>", f'<p class="meta">{html.escape(headline(doc))}<br>'
             + "".join(f"{html.escape(n)}<br>" for n in notes) + "suspects: "
             f"<b>{html.escape(', '.join(doc['suspects']) or 'none')}</b></p>"]
    if png is not None:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<img class="plot" alt="screen per node" src="data:image/png;base64,'
                     f'{data}">')
    else:
        parts.append(f'<p class="meta">{html.escape(NO_PLOT)}</p>')
    parts += ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        style = ' style="background:#fee2e2"' if row[1] != "pass" else ""
        parts.append(f"<tr{style}>" + "".join(f"<td>{html.escape(values.shown(c))}</td>"
                                              for c in row) + "</tr>")
    parts.append("</table>")
    if shown := named_lines(doc) + cleared_lines(doc):
        parts += ["<ul>", *(f"<li>{html.escape(line)}</li>" for line in shown), "</ul>"]
    return "\n".join(parts) + "\n"


# What could make a line of markdown more than its text: an image or a link (`![x](url)`),
# raw HTML, emphasis, code, a table's cell border (a newline is escaped by values.shown)
_MARKDOWN = re.compile(r"([\\`*\[\]<>|])")
NO_PLOT = ("the per-node plot is not drawn: matplotlib is not installed for the Python that "
           "wrote this report (install it there, e.g. pip install matplotlib)")


def md(text: object) -> str:
    """Text from a screen.json as markdown shows it, never as markdown reads it: one line
    (control characters escaped), its markdown characters backslash-escaped."""
    return _MARKDOWN.sub(r"\\\1", values.shown(text))


def markdown_section(doc: ScreenDocument, plot: bool) -> str:
    head, rows = node_rows(doc)
    lines = ["", f"## {SECTION_TITLE}", "", f"- {md(headline(doc))}", f"- {md(rounds_line(doc))}",
             *(f"- {md(n)}" for n in extra_lines(doc)),
             f"- suspects: {md(', '.join(doc['suspects']) or 'none')}", ""]
    lines += [f"![screen per node](plots/{PLOT_FILE})" if plot else f"- {NO_PLOT}", ""]
    lines += ["| " + " | ".join(md(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(md(c) for c in r) + " |" for r in rows]
    lines += ["", *(f"- {md(line)}" for line in named_lines(doc) + cleared_lines(doc))]
    return "\n".join(lines) + "\n"


def add_to_report(directory: Path, tree: layout.Install) -> str | None:
    """Add the newest screen to the analyzer's report in `directory` (index.html, report.md,
    plots/screen.png); the screen's stamp, or None when the install has no screen."""
    found = load_newest(tree)
    if found is None:
        return None
    path, doc = found
    try:
        png: bytes | None = plot_png(doc)
    except ImportError:  # no matplotlib: the table still goes in
        png = None
    if png is not None:
        (directory / "plots").mkdir(parents=True, exist_ok=True)
        atomic_write(directory / "plots" / PLOT_FILE, png)
    report_md, index = directory / "report.md", directory / "index.html"
    markdown, page = with_section(report_md.read_text() if report_md.is_file() else None,
                                  index.read_text(), doc, png)
    if markdown is not None:
        atomic_write(report_md, markdown)
    atomic_write(index, page)
    return str(doc.get("stamp") or path.parent.name)


def report_section(directory: Path, tree: layout.Install) -> str | None:
    """The screen's section of `llmb-run report` (a llmb.llmbrun.report.Section): the newest
    screen added, and the line that says which, or None when the install has none."""
    stamp = add_to_report(directory, tree)
    if stamp is None:
        return None
    return f"includes the newest screen ({stamp}, {tree.screens / stamp})"


def with_section(markdown: str | None, page: str, doc: ScreenDocument, png: bytes | None
                 ) -> tuple[str | None, str]:
    """The report's markdown and HTML with the screen's section added (what add_to_report
    writes, and what verify-archive expects of an archive's report)."""
    if markdown is not None:
        markdown += markdown_section(doc, png is not None)
    end = page.rfind("</body>")
    if end < 0:
        end = len(page)
    return markdown, page[:end] + html_section(doc, png) + page[end:]
