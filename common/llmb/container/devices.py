"""What a screen task finds on its host: CUDA and its GPUs (each GPU's identity, so that a bad
one can be found in the machine), and nccl-tests' all_reduce_perf in the image. torch is
imported inside the functions."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TypedDict

from llmb.container import gpuhealth

NCCL_TESTS_BINARY = "all_reduce_perf"


def has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


class GpuIdentity(TypedDict):
    index: int
    name: str
    uuid: str | None  # GPU-<uuid>
    pci_bus_id: str | None
    serial: str | None
    driver: str | None


def gpu_identity(index: int) -> GpuIdentity:
    """Name, UUID, PCI bus id and serial of CUDA device `index`, so that a bad one can be
    found in the machine, and the driver: PyTorch's device properties, completed from
    nvidia-smi (llmb.container.gpuhealth)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    ident: GpuIdentity = {"index": index, "name": props.name,
                          "uuid": f"GPU-{uuid}" if uuid is not None else None,
                          "pci_bus_id": None, "serial": None, "driver": None}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    mine = visible[index].strip() if index < len(visible) else str(index)
    for row in gpuhealth.identity_rows():
        if row["uuid"] == ident["uuid"] or (ident["uuid"] is None and mine in (row["index"],
                                                                               row["uuid"])):
            ident.update({"uuid": row["uuid"], "pci_bus_id": row["pci.bus_id"],
                          "serial": row["serial"], "driver": row.get("driver_version")})
    return ident


def nccl_tests_binary() -> str | None:
    """all_reduce_perf on PATH, when it was built with MPI (without MPI each process would
    run an all-reduce of its own, one rank each); None otherwise."""
    path = shutil.which(NCCL_TESTS_BINARY)
    if path is None:
        return None
    try:
        return path if b"libmpi" in Path(path).read_bytes() else None
    except OSError:
        return None


def nccl_tests_cycles(binary: str) -> bool:
    """Whether this all_reduce_perf has -N/--run_cycles (nccl-tests since mid 2024): each
    cycle prints the whole table again, the screen's repeats."""
    try:
        return b"run_cycles" in Path(binary).read_bytes()
    except OSError:
        return False
