"""The Python entrypoint of every Megatron-Bridge recipe (bridge/<name>/): one for all.

No arguments: login-node launch of the recipe in LLMB_RECIPE_DIR (launch.sh sets it) or, when
that is unset, in the working directory (llmb-run runs dry runs there). `dry-runs`: llmb-run's
dry runs, as every recipe's entrypoint (llmb.entrypoint). `train --manifest PATH`: what every
rank of a SMOKE_TEST job runs (llmb's smoke workload, printing Megatron-Bridge's log lines).
"""

import os
import sys
from pathlib import Path

BRIDGE_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BRIDGE_DIR.parent / "common"))

from llmb.entrypoint import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(Path(os.environ.get("LLMB_RECIPE_DIR") or Path.cwd()).resolve(),
                  sys.argv[1:]))
