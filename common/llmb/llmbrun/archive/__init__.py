"""llmb-run archive and verify-archive: runs, analysis and facts packed to share, and checked
anywhere. What the rest of llmb-run may use of it is exported here (an import contract in
pyproject.toml holds the rest to it); its modules: docs/architecture.md.
"""

from llmb.llmbrun.archive.pack import cmd_archive
from llmb.llmbrun.archive.verify import cmd_verify

__all__ = ["cmd_archive", "cmd_verify"]
