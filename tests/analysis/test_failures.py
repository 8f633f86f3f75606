"""llmb.analysis.failures and the scan rules around it: each real line classified, the root cause
chosen, evidence counted only after the last step line, restarts, and the gates that keep it
cheap."""

from __future__ import annotations

import pytest
from llmb.analysis import failures, timing

PIPE = ("Training epoch 0, iteration {i}/{last} | lr: 1.5e-05 | global_batch_size: 128 | "
        "global_step: {i} | reduced_train_loss: {loss} | train_step_timing in s: {t} | "
        "TFLOPS_per_GPU: 610.2 | consumed_samples: 1536")


def pipe(i: int, t: str = "1.5", last: int = 49, loss: str = "11.96") -> str:
    return PIPE.format(i=i, t=t, last=last, loss=loss)


# (line as the program prints it, kind, nodes, fault)
LINES = [
    ("slurmstepd: error: *** JOB 494583 ON nid0001 CANCELLED AT 2024-04-20T09:09:37 DUE TO "
     "TIME LIMIT ***", "time_limit", (), False),
    ("slurmstepd: error: *** STEP 494583.0 ON nid0001 CANCELLED AT 2024-04-20T09:09:37 DUE TO "
     "TIME LIMIT ***", "time_limit", (), False),
    ("slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2020-01-01T00:00:00 DUE TO PREEMPTION ***",
     "preempted", (), False),
    ("slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2020-01-01T00:00:00 ***", "cancelled", (),
     False),
    ("slurmstepd: error: *** STEP 1943824.0 ON jean-zay-iam17 CANCELLED AT 2023-03-06T03:17:51 "
     "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***", "node_failure",
     ("jean-zay-iam17",), False),
    ("slurmstepd: error: *** JOB 12 STEPD TERMINATED ON nid007 AT 2025-01-01T00:00:00 DUE TO "
     "JOB NOT ENDING WITH SIGNALS ***", "node_failure", ("nid007",), True),
    ("srun: error: Node failure on jean-zay-iam37", "node_failure", ("jean-zay-iam37",), True),
    ("srun: error: nid001240: tasks 32-39: Exited with exit code 1", "task_exit",
     ("nid001240",), True),
    ("srun: error: nid01934: tasks 2,4-5,7: Terminated", "task_exit", ("nid01934",), False),
    ("srun: error: nid002: task 3: Killed", "task_exit", ("nid002",), False),
    ("srun: error: nid003: task 0: Segmentation fault (core dumped)", "task_exit", ("nid003",),
     True),
    ("srun: error: holy8a24101: task 0: Out Of Memory", "oom", ("holy8a24101",), True),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=6959634.0. Some of the step tasks "
     "have been OOM Killed.", "oom", (), False),
    (" 3: [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB.",
     "oom", (), False),
    ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.10 GiB total "
     "capacity)", "oom", (), False),
    ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1, "
     "NumelOut=1, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
     "nccl_timeout", (), False),
    ("NVONLY AGBAR:SM 3 [1]:expecting 1233 got 1232", "userbuffers", (), False),
    ("45: [rank45]: RuntimeError: Rank 45, node nid001812, device 5, iteration 42: Unexpected "
     "result tensor(nan, device='cuda:5') (message='found NaN in local grad norm for bucket #0 "
     "in backward pass before data-parallel communication collective')", "nan", ("nid001812",),
     True),
    ("AssertionError: Rank 13: found NaN in local grad norm in backward pass before "
     "data-parallel communication collective. Device: 5, node: node-15-11", "nan",
     ("node-15-11",), True),
    ("torch.distributed.DistBackendError: NCCL communicator was aborted on rank 37.",
     "exception", (), False),
]


@pytest.mark.parametrize(("line", "kind", "nodes", "fault"), LINES,
                         ids=[f"{k}-{i}" for i, (_, k, _, _) in enumerate(LINES)])
def test_each_line_is_classified(line: str, kind: str, nodes: tuple[str, ...], fault: bool
                                 ) -> None:
    ev = failures.classify(line)
    assert ev is not None
    assert (ev.kind, ev.nodes, ev.fault) == (kind, nodes, fault)
    # The scan only looks at lines holding a gate: every classified line must hold one.
    assert any(gate.decode() in line for gate in failures.GATES)


@pytest.mark.parametrize("line", [
    "[NeMo W 2025-04-11 14:48:45 nemo_logging:405] UserWarning: errors here are harmless",
    "nid001:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "error rate: 0.1", "", "   ",
])
def test_noise_is_not_evidence(line: str) -> None:
    assert failures.classify(line) is None


def test_root_cause_beats_its_consequences() -> None:
    found = failures.Findings()
    for line in ("[rank3]:[E411 1:2:3.4 x.cpp:1] [Rank 3] Watchdog caught collective operation "
                 "timeout: WorkNCCL(SeqNum=1) ran for 600000 milliseconds before timing out.",
                 "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB.",
                 "srun: error: nid005: task 5: Exited with exit code 1",
                 "srun: error: nid004: tasks 0-3: Killed"):
        found.add(failures.classify(line))
    assert found.primary()[0] == "oom"
    assert found.suspects() == ["nid005"]  # the node that exited, not the one srun killed
    assert found.summary().startswith("out of memory: torch.OutOfMemoryError")


def test_a_task_exit_alone_names_its_node() -> None:
    found = failures.Findings()
    found.add(failures.classify("srun: error: nid002: task 3: Killed"))
    assert found.suspects() == ["nid002"]
    assert failures.explain(found, complete=False, last=7, final=49, steps=8) == \
        "stopped at iteration 7 of 49: srun: error: nid002: task 3: Killed"


def test_many_ranks_repeating_a_line_stay_bounded() -> None:
    found = failures.Findings()
    for r in range(5000):
        found.add(failures.classify(f"srun: error: nid{r:05d}: task {r}: Exited with exit code 1"))
    seen = found.kinds["task_exit"]
    assert seen.count == 5000 and len(seen.nodes) == failures.NODES_MAX


def test_explain_wording() -> None:
    empty = failures.Findings()
    assert failures.explain(empty, complete=True, last=49, final=49, steps=50) is None
    assert failures.explain(empty, complete=False, last=None, final=None, steps=0) == \
        "no training step in the log and no error line after the start-up"
    assert failures.explain(empty, complete=False, last=30, final=49, steps=31) == \
        "stopped at iteration 30 of 49; nothing after the last step line says why"


# --- the scan rules ---------------------------------------------------------------------------

def test_evidence_counts_only_after_the_last_step() -> None:
    scan = timing.scan_lines([
        pipe(10), "torch.distributed.DistBackendError: a warning that did not stop anything",
        pipe(11), pipe(12),
        "slurmstepd: error: *** JOB 7 ON nid1 CANCELLED AT 2025-04-11T16:18:45 DUE TO TIME "
        "LIMIT ***"])
    assert list(scan.findings.kinds) == ["time_limit"]


def test_a_restart_keeps_what_ended_the_first_attempt() -> None:
    lines = [pipe(i) for i in range(21)]
    lines += ["srun: error: Node failure on nid001234",
              "slurmstepd: error: *** STEP 9.0 ON nid001230 CANCELLED AT 2025-04-11T15:20:01 DUE "
              "TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"]
    lines += [pipe(i, "2.0") for i in range(50)]
    scan = timing.scan_lines(lines)
    assert scan.complete() and not scan.findings
    assert (scan.restart_count, scan.restarts) == (1, [(20, 0)])
    assert scan.before_restart.primary()[0] == "node_failure"
    assert scan.before_restart.suspects() == ["nid001234"]


def test_ranks_out_of_order_are_no_restart() -> None:
    lines = []
    for i in range(50):
        lines += [pipe(i), "8: " + pipe(max(i - 1, 0))]
    assert timing.scan_lines(lines).restart_count == 0


@pytest.mark.parametrize(("value", "counted"), [
    ("1.5", True), ("0", False), ("-2.5", False), ("nan", False), ("inf", False), ("-inf", False),
    ("1e308", False), ("1e-300", False), ("1e-6", True), ("604800", False), ("604799", True),
])
def test_implausible_step_times_never_count(value: str, counted: bool) -> None:
    scan = timing.scan_lines([pipe(i, value) for i in range(50)])
    assert scan.complete() and scan.max_iteration == 49  # the iterations were reached
    assert bool(scan.steps) is counted
    assert (scan.first_bad_time is None) is counted


@pytest.mark.parametrize("loss", ["nan", "inf", "-inf", "NaN"])
def test_nonfinite_loss_is_kept(loss: str) -> None:
    scan = timing.scan_lines([pipe(i, loss=loss if i >= 23 else "11.96") for i in range(50)])
    assert scan.nonfinite is not None and scan.nonfinite[:2] == (23, "reduced_train_loss")
    assert len(scan.steps) == 50  # the step times themselves still count


def test_grad_norm_in_a_step_line() -> None:
    scan = timing.scan_lines([pipe(5) + " | grad_norm: inf"])
    assert scan.nonfinite is not None and scan.nonfinite[:2] == (5, "grad_norm")


def test_huge_digit_runs_do_not_break_the_parse() -> None:
    huge = "9" * 5000  # more digits than int() takes from a string
    scan = timing.scan_lines([pipe(3).replace("iteration 3/49", f"iteration {huge}/49"),
                              f"global_step: {huge} | train_step_timing in s: 1.0"])
    assert list(scan.steps) == [3]  # the first line's global_step; the second has no usable one


def test_a_log_of_nothing_but_errors_is_read_in_bounded_work(tmp_path) -> None:
    log = tmp_path / "log-x_1_0.out"
    with open(log, "wb") as f:
        f.write((pipe(0) + "\n").encode())
        f.write(b"[rank3]: RuntimeError: again\n" * 100_000)
        f.write(b"srun: error: nid009: task 3: Exited with exit code 1\n")  # beyond the bound
    scan = timing.scan_log(log)
    assert scan.evidence_lines == timing.EVIDENCE_LINES_MAX
    assert scan.findings.primary()[0] == "exception"
    assert timing.scan_log(log, chunk_bytes=4096) == scan  # the same first lines, however read


def test_the_last_attempt_decides_how_far_the_run_got() -> None:
    finished_then_requeued = [pipe(i) for i in range(50)] + [pipe(i) for i in range(11)]
    scan = timing.scan_lines(finished_then_requeued)
    assert scan.max_iteration == 10 and not scan.complete()
