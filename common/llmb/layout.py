"""The install tree under $LLMB_INSTALL: every path the installer, setup.sh, launch.sh and
llmb-run share, named in one place.

    $LLMB_INSTALL/
      images/<org>+<name>+<tag>.sqsh        container images (setup.sh, the installer)
      datasets/                              for datasets (the benchmarks use synthetic data)
      venvs/<workload>/                      one login-node venv per workload
      workloads/<workload>/                  LLMB_WORKLOAD: experiments/ (the runs), hf_home/
      cluster_config.yaml                    the install, as llmb-run reads it (0600)
      llmb-run                               the wrapper that runs installer/llmb-run (0700)
      .hf_token                              the Hugging Face token, where one is needed (0600)
      .cache/huggingface/                    HF_HOME: the Hugging Face configs setup placed (hub/)
      .llmb_install_state.json               the installer's record of its setup steps
      llmb_run_history.jsonl                 llmb-run's record of what it submitted
      preflight/<stamp>/, preflight/latest.json    llmb-run preflight's reports
      screens/<stamp>/screen.json            llmb-run screen's results (and the job's output)
      suites/<id>/suite.json                 llmb-run suite's plan (its runs: the history's
                                             records that name the suite); suites/<id>/report/
      report/                                llmb-run report's default output
      llmb-archive-<stamp>.tar.gz            llmb-run archive's default output

setup.sh (bash) creates the first four folders itself; tests/test_layout.py holds it to these
names. STAGE_PATH, the install variable of older recipes, is refused everywhere with
`stage_path_refusal`, the wording common/lib.sh's llmb_check_stage_path prints too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llmb.shared.values import shown

TOP_DIRS = ("images", "datasets", "venvs", "workloads")
CONFIG_FILE = "cluster_config.yaml"
WRAPPER = "llmb-run"
HF_TOKEN_FILE = ".hf_token"
HF_HOME_DIR = ".cache/huggingface"
INSTALL_STATE_FILE = ".llmb_install_state.json"
HISTORY_FILE = "llmb_run_history.jsonl"
PREFLIGHT_DIR = "preflight"
REPORT_DIR = "report"
SCREENS_DIR = "screens"
SCREEN_FILE = "screen.json"
SUITES_DIR = "suites"
SUITE_FILE = "suite.json"
EXPERIMENTS_DIR = "experiments"


@dataclass(frozen=True)
class Install:
    """One install tree, rooted at $LLMB_INSTALL."""

    root: Path

    def __init__(self, root: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "root", Path(root))

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def venvs(self) -> Path:
        return self.root / "venvs"

    @property
    def workloads(self) -> Path:
        return self.root / "workloads"

    def dirs(self, workloads: list[str]) -> list[Path]:
        """The folders an install of these workloads has (setup.sh's `layout` step)."""
        return [*(self.root / d for d in TOP_DIRS[:-1]), *(self.workload(w) for w in workloads)]

    def image(self, file_name: str) -> Path:
        return self.images / file_name

    def venv(self, workload: str) -> Path:
        return self.venvs / workload

    def workload(self, workload: str) -> Path:
        """The default LLMB_WORKLOAD of a workload."""
        return self.workloads / workload

    def experiments(self, workload: str) -> Path:
        return self.workload(workload) / EXPERIMENTS_DIR

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def wrapper(self) -> Path:
        return self.root / WRAPPER

    @property
    def hf_token(self) -> Path:
        return self.root / HF_TOKEN_FILE

    @property
    def hf_home(self) -> Path:
        """HF_HOME of every job: the Hugging Face cache setup fills (hub/models--org--name)."""
        return self.root / HF_HOME_DIR

    @property
    def install_state(self) -> Path:
        return self.root / INSTALL_STATE_FILE

    @property
    def history(self) -> Path:
        return self.root / HISTORY_FILE

    @property
    def preflight(self) -> Path:
        return self.root / PREFLIGHT_DIR

    @property
    def screens(self) -> Path:
        return self.root / SCREENS_DIR

    @property
    def suites(self) -> Path:
        return self.root / SUITES_DIR

    def suite(self, suite_id: str) -> Path:
        """The folder of one suite: its suite.json and its default report/."""
        return self.suites / suite_id

    @property
    def report(self) -> Path:
        return self.root / REPORT_DIR

    def archive(self, stamp: str) -> Path:
        return self.root / f"llmb-archive-{stamp}.tar.gz"


def stage_path_refusal(value: str) -> str:
    """The one line that refuses a set STAGE_PATH (empty counts as set), with the move."""
    return (f"STAGE_PATH={shown(value)} is no longer used; unset it and set LLMB_INSTALL to your "
            "install root (images/, venvs/, workloads/ live under it; old "
            "STAGE_PATH/experiments can be moved to $LLMB_INSTALL/workloads/<workload>/"
            "experiments)")


def stage_path_problem(environ: Mapping[str, str]) -> str | None:
    return stage_path_refusal(environ["STAGE_PATH"]) if "STAGE_PATH" in environ else None
