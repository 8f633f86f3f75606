"""NeMo 2 / Lightning logs: `train_step_timing` step lines (llmb.analysis.stepline reads one).

The bulk form is the pipe form as Lightning prints it: `Training epoch 0, iteration 11/49 | lr:
1.5e-05 | ... | consumed_samples: 1536`, with NeMo's fields between (`tokens_per_sec_per_gpu`, a
trailing `val_loss`: llmb.analysis.bulk says which). Iterations count from 0. Standard library
only: it runs inside the log scan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmb.analysis import bulkform, stepline
from llmb.analysis.bulkform import BETWEEN, NUM, Rows
from llmb.analysis.family import Buffer, Family, clean

if TYPE_CHECKING:
    from llmb.analysis.logscan import LogScan

NEEDLE = b"train_step_timing"
_BETWEEN_FIELDS = (rb"(?: \| (?!lr:|global_batch_size:|global_step:|reduced_train_loss:|"
                   rb"train_step_timing in s:|TFLOPS_per_GPU:|consumed_samples:)[^|\r\n]{1,120})*?")
# Its literal start lets the expression engine skip to it at memory speed; what comes before it
# on its line is the line's prefix. Fields between: anywhere after `lr` (Lightning prints the
# metrics in the order they were first logged); those after TFLOPS inside its optional group,
# so that no two runs of fields between meet (two that met could share a line's fields in as
# many ways as it has: time quadratic in its length).
FORMS = bulkform.two_forms(
    rb"Training epoch \d{1,9}, iteration (\d{1,18})/(\d{1,18}) \| lr: [0-9.eE+-]{1,30}"
    + BETWEEN + rb" \| global_batch_size: (\d{1,18})" + BETWEEN +
    rb" \| global_step: (\d{1,18})" + BETWEEN + rb" \| reduced_train_loss: " + NUM + BETWEEN
    + rb" \| train_step_timing in s: (" + NUM + rb")" + BETWEEN +
    rb"(?: \| TFLOPS_per_GPU: (" + NUM + rb")" + BETWEEN + rb")?"
    rb" \| consumed_samples: \d{1,18}" + BETWEEN + rb"(?:\x1b\[[0-9;]{0,9}m){0,4}(?=[\r\n]|\Z)",
    _BETWEEN_FIELDS)
# The names a prefix or a field between may not hold (in any case: the line-by-line read takes
# NeMo's in any case, and whatever case is refused is only read line by line); looked for as
# plain text, a tenth of the cost of one expression over them.
KEYS = (b"iteration", b"train_step_timing", b"tflops_per_gpu", b"global_batch_size",
        b"global_step", b"reduced_train_loss", b"grad_norm", b"grad norm")


def _read(scan: LogScan, buf: Buffer, start: int, stop: int, pos: int, after: int
          ) -> stepline.StepLine | None:
    return stepline.parse(clean(buf[start:stop]))


def _bulk(buf: Buffer, end: int, carried: object, order: tuple[int, int]) -> Rows | None:
    columns = bulkform.columns(FORMS, order, KEYS, NEEDLE, buf, end)
    if columns is None:
        return None
    found, first, form = columns
    read, between = form.columns(m.groups() for m in found)
    _, finals, gbs, steps, times, tflops = read
    if not bulkform.nothing_read_in(KEYS, between):
        return None
    texts = [t.decode() if t is not None else "" for t in tflops]
    return bulkform.make_rows(first, found[-1].end(), 0, list(map(int, finals)),
                              list(map(int, gbs)), list(map(int, steps)),
                              [float(t) for t in times], [float(t) if t else None for t in texts],
                              texts)


NEMO = Family("nemo", NEEDLE, _read, _bulk, FORMS[0].pattern, first_iteration=0,
              field_names={"tflops": "TFLOPS_per_GPU", "gbs": "global_batch_size"})
