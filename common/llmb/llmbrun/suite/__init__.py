"""llmb-run suite: every published configuration of an install in one pass (README: Accept a
cluster). What the rest of llmb-run may use of it is exported here (an import contract in
pyproject.toml holds the rest to it); its modules: docs/architecture.md.
"""

from llmb.llmbrun.suite.commands import DEFAULT_REPEATS, cmd_resume, cmd_status, cmd_submit
from llmb.llmbrun.suite.plan import Selection
from llmb.llmbrun.suite.record import check_id, load, submissions
from llmb.llmbrun.suite.report import cmd_report

__all__ = ["DEFAULT_REPEATS", "Selection", "check_id", "cmd_report", "cmd_resume",
           "cmd_status", "cmd_submit", "load", "submissions"]
