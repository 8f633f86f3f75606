"""llmb-run suite: every published configuration of an install in one pass, or an acceptance
set's (README: Accept a cluster). What the rest of llmb-run may use of it is exported here (an
import contract in pyproject.toml holds the rest to it); its modules: docs/architecture.md.
"""

from llmb.llmbrun.suite.commands import DEFAULT_REPEATS, cmd_resume, cmd_status, cmd_submit
from llmb.llmbrun.suite.plan import Selection
from llmb.llmbrun.suite.record import check_id, load, submissions
from llmb.llmbrun.suite.report import cmd_baseline, cmd_report
from llmb.llmbrun.suite.sets import SET_NAMES, check_name
from llmb.llmbrun.suite.verdict import BASELINE_FILE, VERDICT_FILE

__all__ = ["BASELINE_FILE", "DEFAULT_REPEATS", "SET_NAMES", "VERDICT_FILE", "Selection",
           "check_id", "check_name", "cmd_baseline", "cmd_report", "cmd_resume", "cmd_status",
           "cmd_submit", "load", "submissions"]
