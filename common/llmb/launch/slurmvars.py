"""Slurm's launch variables (CLUSTER_TYPE=slurm): the account and partition to charge and run
in, the GPUs requested as GRES, the container image pyxis reads.

`settings` checks them for llmb.launch.request: SBATCH_ACCOUNT and SBATCH_PARTITION are
required and hold only what a Slurm name may (llmb.shared.shellsafe); SBATCH_GPUS_PER_NODE
(request the GPUs as --gres=gpu:N) must match the tasks per node, one task per GPU; the
repository is mounted into the container, so its path must be one pyxis can mount; the image is
RUN_CONF_IMAGE or the one setup.sh imports under the install, and must be a regular file (a
dry run before setup.sh shows the job and says the real run refuses it). Node placement
(LLMB_NODELIST, ...) is llmb.launch.placement's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llmb import layout
from llmb.launch.variables import (
    MAX_GPUS_PER_NODE,
    RequestError,
    checked,
    parse_positive_int,
    setting,
)
from llmb.recipes import catalog, images
from llmb.shared import files, shellsafe
from llmb.shared.values import shown

# What this module reads; launch.sh's request refuses a control character in any of them.
SLURM_VARS = ("SBATCH_ACCOUNT", "SBATCH_PARTITION", "SBATCH_GPUS_PER_NODE")


@dataclass(frozen=True)
class SlurmSettings:
    account: str
    partition: str
    gres: int | None
    image: str


def settings(recipe: catalog.Recipe, env: Mapping[str, str], config: catalog.Config,
           llmb_install: Path, image_override: str | None, dry_run: bool,
           warnings: list[str]) -> SlurmSettings:
    """Slurm's variables for `config`, checked; the image is RUN_CONF_IMAGE as pyxis takes it
    (`image_override`) or the install's. A dry run's note about a missing image goes to
    `warnings`."""
    account = setting(env, "SBATCH_ACCOUNT")
    partition = setting(env, "SBATCH_PARTITION")
    if account is None:
        raise RequestError("SBATCH_ACCOUNT is not set; set it to the Slurm account to "
                           "charge (sacctmgr show assoc user=$USER)")
    if partition is None:
        raise RequestError("SBATCH_PARTITION is not set; set it to the Slurm partition "
                           "to run in (sinfo -s lists them)")
    checked(shellsafe.slurm_name, "SBATCH_ACCOUNT", account, "account")
    checked(shellsafe.slurm_name, "SBATCH_PARTITION", partition, "partition", True)
    gres = None
    if setting(env, "SBATCH_GPUS_PER_NODE") is not None:
        gres = parse_positive_int(env, "SBATCH_GPUS_PER_NODE", maximum=MAX_GPUS_PER_NODE)
        if gres != config.gpus_per_node:
            raise RequestError(
                f"SBATCH_GPUS_PER_NODE={gres} does not match the {config.gpus_per_node} "
                f"tasks per node (GPUS_PER_NODE={config.gpus_per_node} for {config.gpu_type}); "
                f"each task drives one GPU: set SBATCH_GPUS_PER_NODE="
                f"{config.gpus_per_node} or unset it")
    checked(shellsafe.mount_path, "the llmb repository", str(catalog.REPO_ROOT), True)
    default_image = layout.Install(llmb_install).image(images.Image(recipe.image).file_name)
    image = image_override or str(default_image)
    problem = files.path_problem(image, "regular file") if image.startswith("/") else None
    if problem:
        source = "RUN_CONF_IMAGE=" if image_override else "the container image "
        text = (f"{source}{shown(image)} {problem}; run ./setup.sh (it imports "
                f"{recipe.image}) or set RUN_CONF_IMAGE")
        if not dry_run or image_override:  # a value given is checked as the real run does
            raise RequestError(text)
        # the default image before setup.sh imported it: a dry run shows the job, and says
        # that the real run refuses it until then
        warnings.append(f"{text} (the real run refuses it)")
    return SlurmSettings(account, partition, gres, image)
