"""llmb.launch.runai: the launch line of a Run:ai job."""

from __future__ import annotations

import pytest
from launchrequests import RUNAI_ENV, make_request
from llmb.launch import job, runai


def test_runai_launch_line_is_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_SECRET", "app-secret-value")
    req = make_request("nemotron", MODEL_SIZE="340b", JOB_TOTAL_GPUS="256", **RUNAI_ENV)
    paths = job.JobPaths.new(req, stamp=1)
    line = runai.launch_line(req, paths, "/workspace/it's here")
    assert line.endswith("--manifest '/workspace/it'\"'\"'s here/llmb_manifest.json'")
