"""Property-based test of the analyzer (hypothesis): random and mutated logs and manifests,
next to a good log. Whatever the bad log holds: no traceback, the JSON is valid, the table and
CSV render, and the good log is always reported with its own figures."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmb.analysis import cli
from paths import REPO

GOOD_RUN = (REPO / "tests" / "fixtures" / "logs" / "verdicts"
            / "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"
            / "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128_1744420000")
GOOD_LOG = next(GOOD_RUN.rglob("log-*.out")).read_bytes()
BAD_NAME = "pretrain_nemotron4_15b_fp8_gpus32_tp2_pp1_cp1_vpNone_mbs2_gbs128"
SEED_LINES = GOOD_LOG.splitlines(keepends=True)

HOSTILE_NUMBERS = ["1e308", "1e-300", "-1", "0", "nan", "inf", "-inf", "NaN", "1e400",
                   "9" * 5000, "0x10", "", "1_000", "١٢", "--5", "1e", "."]
FRAGMENTS = [
    b"train_step_timing in s: ", b"iteration ", b"/", b"TFLOPS_per_GPU: ", b"global_step: ",
    b"reduced_train_loss: nan", b"Global Checkpoint Save : Rank: 0 : Save duration: ",
    b"srun: error: ", b": task 3: Exited with exit code 1", b"*** JOB 1 ON ", b" CANCELLED AT ",
    b"DUE TO TIME LIMIT ***", b"Watchdog caught collective operation timeout",
    b"torch.OutOfMemoryError: CUDA out of memory", b"found NaN in local grad norm", b"node ",
    b"\r", b"\n", b"\x1b[31m", b"\x00", b"\xff\xfe", b"|", b"Epoch 0: : 100%|", b"[", b"]",
]


@st.composite
def mutated_log(draw: st.DrawFn) -> bytes:
    """A real log with lines dropped, repeated, cut, numbers swapped for hostile ones, and
    fragments of the lines the analyzer reads spliced in at random places."""
    lines = list(SEED_LINES)
    for _ in range(draw(st.integers(0, 12))):
        op = draw(st.sampled_from(["drop", "repeat", "cut", "number", "splice", "swap"]))
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        if op == "drop":
            del lines[i]
        elif op == "repeat":
            lines.insert(draw(st.integers(0, len(lines))), lines[i])
        elif op == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif op == "number":
            value = draw(st.sampled_from(HOSTILE_NUMBERS)).encode()
            lines[i] = draw(st.sampled_from([b"9.31", b"49", b"990", b"11.96"])).join(
                [lines[i].split(b"9.31")[0], value])
        elif op == "splice":
            at = draw(st.integers(0, len(lines[i])))
            piece = b"".join(draw(st.lists(st.sampled_from(FRAGMENTS + [
                v.encode() for v in HOSTILE_NUMBERS]), max_size=8)))
            lines[i] = lines[i][:at] + piece + lines[i][at:]
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return b"".join(lines)


logs = st.one_of(mutated_log(), st.binary(max_size=4096),
                 st.lists(st.sampled_from(FRAGMENTS), max_size=60).map(b"".join))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4), max_leaves=12)
manifests = st.one_of(
    st.none(), st.binary(max_size=200),
    st.fixed_dictionaries({"workload": st.sampled_from(["pretrain_nemotron4", "x", ""]),
                           "model_size": json_values, "dtype": json_values,
                           "num_gpus": json_values, "gpu_type": json_values,
                           "scaling": json_values,
                           "parallelism": st.fixed_dictionaries({"gbs": json_values,
                                                                 "num_layers": json_values}),
                           "options": st.dictionaries(st.sampled_from(
                               ["max_steps", "smoke_test", "nccl_trace"]), json_values)}).map(
        lambda d: json.dumps(d).encode()))


def run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(args)
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=logs, manifest=manifests, name=st.sampled_from([BAD_NAME, "log", "x y\nz", "é"]))
def test_a_bad_log_never_breaks_the_analysis(log: bytes, manifest: bytes | None, name: str
                                             ) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "experiments"
        shutil.copytree(GOOD_RUN, root / "good" / GOOD_RUN.name)
        bad = root / name / f"{name}_1" / name
        bad.mkdir(parents=True)
        (bad / f"log-{name}_9_0.out").write_bytes(log)
        if manifest is not None:
            (bad.parent / "llmb_manifest.json").write_bytes(manifest)

        code, out, err = run(["--format=json", str(root)])
        assert code in (0, 1), err
        assert len(err.splitlines()) <= 1
        data = json.loads(out)
        [good] = [r for r in data["results"] if r["filename"].startswith("good" + os.sep)]
        assert good["status"] == "Success" and good["time_mean"] == 9.32
        assert good["config_key"] == "llama3.1/8b/fp8/h100/8gpu/weak/gbs128"
        for r in data["results"]:
            assert r["status"] in ("Success", "Failed", "Invalid")
            assert r["reason"] is None or "\n" not in r["reason"]
        for fmt in ("table", "csv"):
            code, out, err = run([f"--format={fmt}", "--check", str(root)])
            assert code in (0, 1, 3) and len(err.splitlines()) <= 1
            assert "good" in out or "llama3.1 8b fp8 8gpu" in out
