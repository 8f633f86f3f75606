"""What nvidia-smi says of a screen task's GPU: who it is (index, UUID, PCI bus id, serial, the
driver) and how it is (GPU mode only; llmb.llmbrun.screen.health judges it):

    ecc.errors.uncorrected.volatile.total      uncorrectable ECC errors since the driver loaded
    retired_pages.pending                      a retired page waits for a reset (pre-Hopper)
    remapped_rows.pending / .failure           a remapped row waits for a reset / failed
                                               (--query-remapped-rows, Ampere and later)
    clocks_throttle_reasons.active             what holds the clocks down now (a bit mask)
    power.limit, enforced.power.limit, power.default_limit, clocks.sm, clocks.max.sm
    pcie.link.gen.current/.max, pcie.link.width.current/.max, temperature.gpu

`health` is sampled while the GPU works (`Sampler`: nvidia-smi started in the background as
the matrix multiply begins), since throttling and PCIe link speed are facts of a busy GPU.
nvidia-smi refuses a whole query for one field its driver does not know (`Field "x" is not a
valid field to query.`, exit 2): such a field is left out, the query asked again, and the
field reported as unknown. Values are nvidia-smi's strings (`--format=csv,noheader,nounits`),
"[N/A]" and "[Not Supported]" as None.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence

IDENTITY = ("index", "uuid", "pci.bus_id", "serial", "driver_version")
HEALTH = ("uuid", "ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
          "clocks_throttle_reasons.active", "power.limit", "enforced.power.limit",
          "power.default_limit", "clocks.sm", "clocks.max.sm", "pcie.link.gen.current",
          "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
          "temperature.gpu")
REMAPPED = ("gpu_uuid", "remapped_rows.pending", "remapped_rows.failure",
            "remapped_rows.uncorrectable")
FORMAT = "--format=csv,noheader,nounits"
TIMEOUT_S = 60
_UNKNOWN = re.compile(r'Field "([^"]+)" is not a valid field to query')
_NOTHING = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}
# One GPU's facts: the queries' fields by name (None where the driver has no value), the fields
# it does not know (unknown_fields) and when it was asked (sampled).
Facts = dict[str, str | list[str] | None]


def _run(switch: str, fields: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nvidia-smi", f"--{switch}={','.join(fields)}", FORMAT],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                          stdin=subprocess.DEVNULL)


def parse(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """nvidia-smi's CSV rows as {field: value}."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if line.strip() and len(cells) == len(fields):
            rows.append({f: (None if c in _NOTHING else c) for f, c in zip(fields, cells,
                                                                            strict=True)})
    return rows


def query(fields: Sequence[str], switch: str = "query-gpu"
          ) -> tuple[list[dict[str, str | None]], list[str]]:
    """(rows, the fields this driver does not know); ([], []) without nvidia-smi or when it
    fails otherwise."""
    wanted: list[str] = list(fields)
    unknown: list[str] = []
    if shutil.which("nvidia-smi") is None:
        return [], []
    while wanted:
        try:
            proc = _run(switch, wanted)
        except (OSError, subprocess.SubprocessError):
            return [], unknown
        if proc.returncode == 0:
            return parse(proc.stdout, wanted), unknown
        bad = _UNKNOWN.search(proc.stdout + proc.stderr)
        if bad is None or bad.group(1) not in wanted:
            return [], unknown
        wanted.remove(bad.group(1))
        unknown.append(bad.group(1))
    return [], unknown


def identity_rows() -> list[dict[str, str | None]]:
    """Every visible GPU's index, UUID, PCI bus id, serial and driver version."""
    return query(IDENTITY)[0]


def health_of(uuid: str | None, text: str, remapped: str, unknown: Sequence[str]
              ) -> Facts:
    """One GPU's facts from the two queries' output (its row by UUID)."""
    fields = [f for f in HEALTH if f not in unknown]
    mine = next((r for r in parse(text, fields) if r.get("uuid") == uuid), {})
    remap = next((r for r in parse(remapped, REMAPPED) if r.get("gpu_uuid") == uuid), {})
    facts: Facts = {k: v for k, v in mine.items() if k != "uuid"}
    facts.update({k: v for k, v in remap.items() if k != "gpu_uuid"})
    facts["unknown_fields"] = list(unknown)
    return facts


class Sampler:
    """The health query started in the background (nvidia-smi takes a moment to start: it
    answers while the GPU is busy); `facts()` waits for it."""

    def __init__(self, uuid: str | None) -> None:
        self.uuid = uuid
        self.procs: list[subprocess.Popen[str]] = []
        if shutil.which("nvidia-smi") is None:
            return
        for switch, fields in (("query-gpu", HEALTH), ("query-remapped-rows", REMAPPED)):
            try:
                self.procs.append(subprocess.Popen(
                    ["nvidia-smi", f"--{switch}={','.join(fields)}", FORMAT],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    stdin=subprocess.DEVNULL))
            except OSError:
                return

    @staticmethod
    def _wait(proc: subprocess.Popen[str]) -> tuple[int | None, str]:
        try:
            out, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None, ""
        return proc.returncode, out

    def facts(self) -> Facts | None:
        """This GPU's facts (None without nvidia-smi). A query refused for a field this
        driver lacks is asked again, then, without it (`sampled` says so)."""
        if len(self.procs) < 2:
            return None
        (code, text), (remap_code, remapped) = (self._wait(p) for p in self.procs)
        unknown: list[str] = []
        sampled = "while busy"
        if code != 0:
            rows, unknown = query(HEALTH)
            fields = [f for f in HEALTH if f not in unknown]
            text = "\n".join(",".join(r.get(f) or "[N/A]" for f in fields) for r in rows)
            sampled = "after the work"
        facts = health_of(self.uuid, text, remapped if remap_code == 0 else "", unknown)
        facts["sampled"] = sampled
        return facts
