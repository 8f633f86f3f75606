"""llmb.launch.job: where a run lives, the manifest it records, the command each rank runs."""

from __future__ import annotations

import json

from launchrequests import INSTALL, make_request
from llmb import manifest
from llmb.launch import job
from paths import REPO


def test_paths_follow_nemo_runs_layout():
    req = make_request("nemotron", JOB_TOTAL_GPUS="64")
    paths = job.JobPaths.new(req, stamp=1744407000)
    exp = "pretrain_nemotron4_15b_fp8_gpus64_tp2_pp1_cp1_vpNone_mbs2_gbs256"
    assert paths.experiment == exp and paths.run_id == f"{exp}_1744407000"
    experiments = INSTALL / "workloads" / "pretrain_nemotron4" / "experiments"
    assert paths.run_dir == experiments / exp / paths.run_id
    assert paths.job_dir == paths.run_dir / exp
    assert paths.manifest == manifest.path_in(paths.run_dir)


def test_the_manifest_is_the_contract_and_holds_no_secret():
    req = make_request("llama3.1", JOB_TOTAL_GPUS="16", MAX_STEPS="20")
    m = job.build_manifest(req, job.JobPaths.new(req, stamp=1), created="2026-11-23T00:00:00Z",
                           commit="abc")
    assert manifest.check(m) is m and m["schema"] == manifest.SCHEMA
    assert (m["num_gpus"], m["nodes"], m["options"]["max_steps"]) == (16, 2, 20)
    assert m["parallelism"]["dp"] * m["parallelism"]["tp"] * m["parallelism"]["cp"] == 16
    assert m["git_commit"] == "abc" and m["created"] == "2026-11-23T00:00:00Z"
    assert "hf_do_not_print" not in json.dumps(m)  # HF_TOKEN was set: it stays in the env


def test_every_rank_runs_the_recipes_entrypoint_on_the_manifest():
    req = make_request("nemotronh", JOB_TOTAL_GPUS="32")
    paths = job.JobPaths.new(req, stamp=1)
    assert job.train_command(req, paths) == [
        "python", str(REPO / "nemotronh" / "pretrain_nemotronh.py"), "train", "--manifest",
        str(paths.manifest)]
    assert job.llmb_version() != "unknown"
