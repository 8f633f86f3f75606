"""llmb-run screen: one short job that finds the slow GPU, node or link (README: Screen a
cluster). What the rest of llmb-run may use of it is exported here (an import contract in
pyproject.toml holds the rest to it); its modules: docs/architecture.md.
"""

from llmb.llmbrun.screen.baseline import default_path as baseline_path
from llmb.llmbrun.screen.job import DEFAULT_TIMEOUT_S, MAX_ROUNDS, cmd_screen
from llmb.llmbrun.screen.render import (
    PLOT_FILE,
    add_to_report,
    load_newest,
    report_section,
    with_section,
)
from llmb.llmbrun.screen.results import MAX_NODES, ScreenDocument
from llmb.llmbrun.screen.results import checked as checked_document
from llmb.llmbrun.screen.suspects import (
    MAX_SCREEN_BYTES,
    Screen,
    for_exclude,
    newest_screen,
    stamp_folders,
)

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_NODES", "MAX_ROUNDS", "MAX_SCREEN_BYTES", "PLOT_FILE",
           "Screen", "ScreenDocument", "add_to_report", "baseline_path", "checked_document",
           "cmd_screen", "for_exclude", "load_newest", "newest_screen", "report_section",
           "stamp_folders", "with_section"]
