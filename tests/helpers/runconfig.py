"""An install's cluster_config.yaml as llmb-run reads it (llmb.llmbrun.clusterconfig), for the
unit tests of llmb-run's parts: runinstall's install, found and checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import runinstall
from llmb.llmbrun import clusterconfig


def installed(root: Path, **config: Any) -> clusterconfig.ClusterConfig:
    """runinstall.make_install(root, **config), read back through find_config."""
    runinstall.make_install(root, **config)
    return clusterconfig.find_config(str(root / clusterconfig.CONFIG_FILE), {})
