"""The Run:ai backend: nemo-run's DGXCloudExecutor for a request, and the workload spec it
would POST (built here without any network, for DRY_RUN)."""

from __future__ import annotations

import shlex

from llmb import manifest as run_manifest
from llmb.launch import job, jobenv
from llmb.launch.job import JobPaths
from llmb.launch.request import Request


def executor(req: Request):
    import nemo_run as run

    assert req.runai is not None
    cfg = req.config
    ra = req.runai
    return run.DGXCloudExecutor(
        base_url=ra.base_url,
        kube_apiserver_url="",  # unused by nemo-run 0.11.1
        client_id=ra.app_id,
        client_secret=ra.app_secret,
        project_name=ra.project_name,
        container_image=req.image,
        pvc_nemo_run_dir=ra.pvc_dir,
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        nprocs_per_node=cfg.gpus_per_node,
        pvcs=[{"name": ra.mount_name, "path": ra.mount_path, "existingPvc": True,
               "claimName": ra.claim_name}],
        env_vars=jobenv.job_env(req.recipe, cfg, req.nccl_trace),
        launcher="torchrun",
    )


def payload(req: Request, paths: JobPaths) -> dict[str, object]:
    """The workload spec nemo-run 0.11.1 POSTs for this job, built here without any network.

    DGXCloudExecutor.create_training_job builds and POSTs its payload in one step (it needs a
    token and the project/cluster ids first), so this mirrors its shape instead; the ids it
    looks up at submission are shown as placeholders. The secret is not part of the payload.
    """
    assert req.runai is not None
    cfg = req.config
    name = paths.experiment.replace("_", "-").replace(".", "-").lower()[:34]
    pvc_job_dir = f"{req.runai.pvc_dir.rstrip('/')}/experiments/{paths.experiment}/" \
                  f"{paths.run_id}/{paths.experiment}"
    spec: dict[str, object] = {
        "command": f"/bin/bash {pvc_job_dir}/launch_script.sh",
        "image": req.image,
        "compute": {"gpuDevicesRequest": cfg.gpus_per_node, "largeShmRequest": True},
        "storage": {"pvc": [{"name": req.runai.mount_name, "path": req.runai.mount_path,
                             "existingPvc": True, "claimName": req.runai.claim_name}]},
        "environmentVariables": [{"name": k, "value": v} for k, v in
                                 jobenv.job_env(req.recipe, cfg, req.nccl_trace).items()],
    }
    if cfg.nodes > 1:
        endpoint = "workloads/distributed"
        spec |= {"distributedFramework": "PyTorch", "minReplicas": cfg.nodes,
                 "maxReplicas": cfg.nodes, "numWorkers": cfg.nodes}
    else:
        endpoint = "workloads/trainings"
    return {
        "url": f"{req.runai.base_url}/{endpoint}",
        "payload": {"name": name, "useGivenNameAsPrefix": True,
                    "projectId": f"<id of project {req.runai.project_name}>",
                    "clusterId": "<cluster id of that project>", "spec": spec},
        "auth": {"url": f"{req.runai.base_url}/token", "appId": req.runai.app_id,
                 "appSecret": "********"},
        "launch_script": launch_line(req, paths, pvc_job_dir),
    }


def launch_line(req: Request, paths: JobPaths, pvc_job_dir: str) -> str:
    cfg = req.config
    manifest = f"{pvc_job_dir}/{run_manifest.NAME}"
    entry = job.entrypoint_file(req).relative_to(job.repo_root())
    return (f"torchrun --nnodes={cfg.nodes} --nproc-per-node={cfg.gpus_per_node} "
            f"--node-rank=$GROUP_RANK {shlex.quote(f'/nemo_run/code/{entry}')} train "
            f"--manifest {shlex.quote(manifest)}")
