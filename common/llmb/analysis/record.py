"""The analyzer's JSON (`--format=json`; an archive's analysis.json) as a type, for its readers.

llmb-run reads the analyzer's JSON back: from the analyzer's own output (report, suite
report, status), and from an archive someone else made (verify-archive renders its report again
from it). `checked(data)` holds it to AnalyzerJson (llmb.shared.records) before any field is
used: a result whose file name is a list, a figure that is text or a verdict that is a number is
one line naming the field, never a traceback. The fields are those llmb.analysis.formats writes
(RESULT_FIELDS for each result; llmb.analysis.verdicts for each configuration;
llmb.analysis.compare for a comparison); the readers use no other. Standard library only.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from llmb.shared import records
from llmb.shared.records import Bound

Name = Annotated[str, Bound(text=256)]  # a status, recipe, dtype, verdict, config key
Path = Annotated[str, Bound(text=8192)]  # a log's path under the tree analyzed
Count = int | None
Figure = float | None
Text = str | None  # a reason, a source, an error: bounded as every text is
MAX_RESULTS = 1_000_000  # logs of one analysis (the analyzer reads 200,000 in bounded memory)


class _ResultKeys(TypedDict):
    filename: Path
    status: Name


class AnalyzedRun(_ResultKeys, total=False):
    """One log's result (llmb.analysis.formats.RESULT_FIELDS)."""

    time_mean: Figure
    time_std_dev: Figure
    tflops_per_gpu_mean: Figure
    tflops_per_gpu_std_dev: Figure
    max_iteration: Count
    experiment: Text
    path: Text
    final_iteration: Count
    window_steps: Count
    tflops_source: Name | None
    identified_by: Name | None
    recipe: Name | None
    model_size: Name | None
    dtype: Name | None
    gpu_type: Name | None
    num_gpus: Count
    global_batch_size: Count
    seq_length: Count
    scaling: Name | None
    tokens_per_second: Figure
    mfu: Figure
    time_to_train_days: Figure
    reference_step_time: Figure
    reference_source: Text
    pct_of_reference: Figure
    checkpoint_save_s: Figure
    checkpoint_load_s: Figure
    smoke_test: bool | None
    error: Text
    reason: Text
    suspect_nodes: Annotated[list[Name], Bound(items=65_536)]
    config_key: Name | None


class _ConfigKeys(TypedDict):
    config_key: Name


class Configuration(_ConfigKeys, total=False):
    """One configuration's figures and verdict (llmb.analysis.verdicts)."""

    recipe: Name | None
    model_size: Name | None
    dtype: Name | None
    gpu_type: Name | None
    num_gpus: Count
    scaling: Name | None
    global_batch_size: Count
    seq_length: Count
    smoke_test: bool | None
    experiment: Text
    runs: int
    successful_runs: int
    failed_runs: int
    invalid_runs: int
    time_median: Figure
    time_min: Figure
    time_max: Figure
    time_cv: Figure
    step_jitter_pct: Figure
    reference_step_time: Figure
    reference_source: Text
    pct_of_reference: Figure
    verdict: Name
    mfu_median: Figure
    tokens_per_second_median: Figure
    files: Annotated[list[Path], Bound(items=MAX_RESULTS)]


class Comparison(Configuration, total=False):
    """A configuration against the same one in a baseline tree (llmb.analysis.compare)."""

    baseline_time_median: Figure
    delta_pct: Figure
    significant: bool
    spread_pct: Figure
    baseline_runs: Count
    baseline_pct_of_reference: Figure


class _AnalyzerKeys(TypedDict):
    results: Annotated[list[AnalyzedRun], Bound(items=MAX_RESULTS)]
    configurations: Annotated[list[Configuration], Bound(items=MAX_RESULTS)]
    summary: dict[str, Any]


class AnalyzerJson(_AnalyzerKeys, total=False):
    """The analyzer's whole JSON document."""

    analysis: dict[str, Any]  # what was analyzed, and how (window, tolerance, ...)
    comparison: list[Comparison] | None
    skipped: Annotated[list[Any], Bound(items=MAX_RESULTS)]
    warnings: list[Any]


def checked(data: Any) -> AnalyzerJson:
    """data held to AnalyzerJson; llmb.shared.records.BadRecord naming the field otherwise."""
    return records.check(AnalyzerJson, data)
