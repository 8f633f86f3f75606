"""A set's baseline file: the figure each workload x dtype of a set is held to, per GPU type
(`llmb-run suite report --baseline FILE`, written by `llmb-run suite baseline --save FILE`).

    schema: 1
    set: exemplar                  # the set it is for (common/suites/<set>.yaml)
    release: v26.08.00             # optional: the set's release the figures belong to
    figure: step_time_s            # seconds per training step, lower is faster
    scale: 512                     # the GPUs every figure was measured on
    source: NVIDIA account team, 2026-11-02   # optional: where the figures come from
    comment: ...                   # optional
    baselines:
      h100:                        # GPU type
        pretrain_llama3.1_70b:     # upstream's workload name with its size
          bf16: 10.21              # dtype: the figure
          fp8: 7.43

The figure is the step time in seconds at the set's scale: upstream's llmb-run reports a
pretraining job as s/iter (the mean of iterations 35 to 44) and TFLOPS/GPU
(NVIDIA/exemplar-performance v26.08.00, cli/llmb-run/src/llmb_run/pretrain_log_parser.py), and
at one scale, batch and sequence length throughput (tokens/s/GPU, TFLOPS/GPU) is the inverse of
the step time: a run's performance against its baseline is baseline / measured step time.
llmb's measured figure is the analyzer's median step time of the configuration's runs.

The file is checked once, where it enters (`load`): a regular file of at most
yamlfile.MAX_YAML_BYTES, YAML (JSON is YAML too), of the BaselineFile type; every GPU type,
workload and dtype of the set it names; every figure a finite number above 0 and at most
MAX_STEP_S. Each refusal is one line naming the entry, its value and what would work.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, TypedDict

from llmb.llmbrun.errors import RunError
from llmb.llmbrun.suite.plan import NAME_LEN
from llmb.llmbrun.suite.sets import SuiteSet
from llmb.shared import files, records, values, yamlfile
from llmb.shared.records import Bound

SCHEMA = 1
FIGURE = "step_time_s"
MAX_STEP_S = 86_400.0  # a day: no training step of a benchmark takes longer
TEXT_LEN = 1024

Name = Annotated[str, Bound(text=NAME_LEN)]
Figure = Annotated[float, Bound(number=1e12)]


class _BaselineKeys(TypedDict):
    schema: int
    set: Name
    figure: Literal["step_time_s"]
    scale: int
    baselines: dict[Name, dict[Name, dict[Name, Figure]]]


class BaselineFile(_BaselineKeys, total=False):
    """A baseline file, as written (see the module's docstring)."""

    release: Name
    source: Annotated[str, Bound(text=TEXT_LEN)]
    comment: Annotated[str, Bound(text=TEXT_LEN)]
    suite: Name  # written by `suite baseline --save`: the suite the figures come from


@dataclass(frozen=True)
class Baseline:
    """A baseline file, checked against its set."""

    path: str
    sha256: str
    text: str  # as checked, in dump's form (its comments dropped): what a verdict keeps
    data: BaselineFile

    @property
    def scale(self) -> int:
        return self.data["scale"]

    def figure(self, gpu_type: str, workload: str, dtype: str) -> float | None:
        return self.data["baselines"].get(gpu_type, {}).get(workload, {}).get(dtype)

    def describe(self) -> str:
        src = self.data.get("source")
        return f"{self.path}" + (f" ({values.shown(src)})" if src else "")


def _refuse(where: str, problem: str) -> RunError:
    return RunError(f"--baseline {values.shown(where)}: {problem}")


def load(path: str, the_set: SuiteSet) -> Baseline:
    """The baseline file at path, checked against the set; RunError naming the first problem."""
    label = f"--baseline {values.shown(path)}"
    data = yamlfile.read_yaml(path, label, RunError)
    try:
        checked = records.check(BaselineFile, data)
    except records.BadRecord as exc:
        figure = exc.field.startswith("baselines.") and exc.field.count(".") >= 3
        raise _refuse(path, f"{exc.problem}; " + (
            "give the step time in seconds, a number above 0" if figure else
            "see docs/llmb-run.md (Exemplar) for the format")) from None
    if checked["schema"] != SCHEMA:
        raise _refuse(path, f"schema is {checked['schema']}; this llmb reads schema {SCHEMA}")
    if checked["set"] != the_set.name:
        raise _refuse(path, f"set is {values.brief(checked['set'])}; the suite ran the "
                      f"{the_set.name} set")
    if checked["scale"] < 1:
        raise _refuse(path, f"scale is {checked['scale']}; give the GPUs the figures were "
                      f"measured on, e.g. {the_set.scale}")
    check_entries(path, checked, the_set)
    text = dump(checked)
    return Baseline(path, hashlib.sha256(text.encode()).hexdigest(), text, checked)


def check_entries(path: str, data: BaselineFile, the_set: SuiteSet) -> None:
    """Every GPU type, workload and dtype is the set's; every figure a step time."""
    for gpu, by_workload in data["baselines"].items():
        if gpu not in the_set.workloads:
            raise _refuse(path, f"baselines.{values.brief(gpu)} is not a GPU type of the "
                          f"{the_set.name} set; give one of {', '.join(the_set.workloads)}")
        known = {w.name: w for w in the_set.workloads[gpu]}
        for name, by_dtype in by_workload.items():
            at = f"baselines.{gpu}.{values.brief(name)}"
            if name not in known:
                raise _refuse(path, f"{at} is not a workload of the {the_set.name} set on "
                              f"{gpu}; give one of {', '.join(known)}")
            for dtype, value in by_dtype.items():
                if dtype not in known[name].dtypes:
                    raise _refuse(path, f"{at}.{values.brief(dtype)} is not a dtype of {name} "
                                  f"in the set; give one of {', '.join(known[name].dtypes)}")
                if not (math.isfinite(value) and 0 < value <= MAX_STEP_S):
                    raise _refuse(path, f"{at}.{dtype} is {value!r}; give the step time in "
                                  f"seconds, a number above 0 and at most {MAX_STEP_S:g}")


def dump(data: BaselineFile) -> str:
    """A baseline file's text (YAML), as `load` reads it back."""
    import yaml

    head = ("# llmb baseline: seconds per training step at `scale` GPUs, per GPU type, "
            "workload and dtype\n# (docs/llmb-run.md, Exemplar)\n")
    return head + yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def save(path: Path, data: BaselineFile) -> None:
    """Write a new baseline file (never over an existing one)."""
    problem = files.path_problem(path, "file")
    if problem != "does not exist":
        raise RunError(f"--save {values.shown(path)} "
                       f"{'exists; choose another name' if problem is None else problem}")
    if not path.parent.is_dir():
        raise RunError(f"--save {values.shown(path)}: {values.shown(path.parent)} is not a "
                       "directory")
    files.atomic_write(path, dump(data))
