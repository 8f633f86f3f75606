"""Slurm's launch variables (CLUSTER_TYPE=slurm): the account and partition to charge and run
in, the GPUs requested as GRES, the container image pyxis reads.

`settings` checks them for llmb.launch.request: SBATCH_ACCOUNT and SBATCH_PARTITION are
required and hold only what a Slurm name may (llmb.shared.shellsafe); SBATCH_GPUS_PER_NODE
requests the GPUs as GRES, by llmb.launch.slurmjob's rule (gpu:N or gpu:TYPE:N, N the tasks
per node, one task per GPU; a bare N stands for gpu:N); the
repository is mounted into the container, so its path must be one pyxis can mount; the image is
RUN_CONF_IMAGE or the one setup.sh imports under the install, and must be a regular file (a
dry run before setup.sh shows the job and says the real run refuses it). Node placement
(LLMB_NODELIST, ...) is llmb.launch.placement's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from llmb import layout
from llmb.launch.slurmjob import Gres, GresError, SlurmSettings, parse_gres
from llmb.launch.variables import RequestError, checked, setting
from llmb.recipes import catalog, images
from llmb.shared import files, shellsafe
from llmb.shared.values import ascii_digits, shown

# What this module reads; launch.sh's request refuses a control character in any of them.
SLURM_VARS = ("SBATCH_ACCOUNT", "SBATCH_PARTITION", "SBATCH_GPUS_PER_NODE")


def settings(recipe: catalog.Recipe, env: Mapping[str, str], config: catalog.Config,
           llmb_install: Path, image_override: str | None, dry_run: bool,
           warnings: list[str]) -> tuple[SlurmSettings, str]:
    """Slurm's variables for `config`, checked, and the image: RUN_CONF_IMAGE as pyxis takes
    it (`image_override`) or the install's. A dry run's note about a missing image goes to
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
    gres = _gres(setting(env, "SBATCH_GPUS_PER_NODE"), config)
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
    return SlurmSettings(account, partition, gres), image


def _gres(value: str | None, config: catalog.Config) -> Gres | None:
    """SBATCH_GPUS_PER_NODE by the GRES rule, its count the tasks per node (GPUS_PER_NODE)."""
    if value is None:
        return None
    text = f"gpu:{value}" if ascii_digits(value) else value  # a bare N: gpu:N
    try:
        return parse_gres(text, config.gpu, config.gpus_per_node)
    except GresError as exc:
        raise RequestError(f"SBATCH_GPUS_PER_NODE={shown(value)} {exc} "
                           f"(GPUS_PER_NODE={config.gpus_per_node}), or unset it") from None
