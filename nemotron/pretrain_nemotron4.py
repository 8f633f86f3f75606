"""Nemotron-4 pre-training entrypoint.

No arguments: login-node launch. `train --manifest <path>`: the in-container half.
"""

import sys
from pathlib import Path

RECIPE_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(RECIPE_DIR.parent / "common"))

from llmb.entrypoint import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(RECIPE_DIR, sys.argv[1:]))
