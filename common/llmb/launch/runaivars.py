"""Run:ai's launch variables (CLUSTER_TYPE=runai): where the job mounts its claim, the Run:ai
API and application it is submitted through, the project, the experiment directory.

`settings` checks them for llmb.launch.request: every one of RUNAI_VARS is required;
CUSTOM_MOUNT is name:path:claimName with Kubernetes names; PVC_DIR is an absolute path under the
mounted path that nemo-run may hand to a shell (llmb.shared.shellsafe); BASE_URL is an http(s)
URL. APP_SECRET is never shown: RunaiSettings keeps it out of repr().
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from llmb.launch.variables import RequestError, checked, setting
from llmb.shared import shellsafe
from llmb.shared.values import shown

RUNAI_VARS = ("CUSTOM_MOUNT", "BASE_URL", "APP_ID", "APP_SECRET", "PROJECT_NAME", "PVC_DIR")
# Kubernetes names (Run:ai mount and claim names): DNS-1123 labels.
K8S_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class RunaiSettings:
    mount_name: str
    mount_path: str
    claim_name: str
    base_url: str
    app_id: str
    project_name: str
    pvc_dir: str
    # The secret is kept out of repr() so no traceback or debug print shows it.
    app_secret: str = field(repr=False)


def settings(env: Mapping[str, str]) -> RunaiSettings:
    """Run:ai's variables, every one required, checked."""
    for name in RUNAI_VARS:
        if setting(env, name) is None:
            raise RequestError(f"{name} is not set; CLUSTER_TYPE=runai needs "
                               f"{', '.join(RUNAI_VARS)}")
    mount = str(setting(env, "CUSTOM_MOUNT"))
    parts = mount.split(":")
    if len(parts) != 3 or not all(parts) or not parts[1].startswith("/"):
        raise RequestError(f"CUSTOM_MOUNT={shown(mount)} is not name:path:claimName "
                           "(e.g. workspace:/workspace:my-pvc-claim)")
    name, path, claim = parts
    for what, label in (("name", name), ("claimName", claim)):
        if not K8S_NAME_RE.fullmatch(label):
            raise RequestError(f"CUSTOM_MOUNT={shown(mount)}: the {what} {shown(label)} is not a "
                               "Kubernetes name (lower-case letters, digits and -)")
    pvc_dir = checked(shellsafe.job_path, "PVC_DIR", str(setting(env, "PVC_DIR")))
    if not pvc_dir.startswith("/"):
        raise RequestError(f"PVC_DIR={pvc_dir} is not an absolute path; it is a directory on "
                           f"the mounted claim, e.g. {path.rstrip('/')}/nemo-run")
    if os.path.commonpath([path, pvc_dir]) != path.rstrip("/") and path != "/":
        raise RequestError(f"PVC_DIR={pvc_dir} is not under the CUSTOM_MOUNT path {path}; "
                           "the experiment directory must live on the mounted claim")
    base_url = str(setting(env, "BASE_URL")).rstrip("/")
    if not re.match(r"^https?://[^\s/]+", base_url) or re.search(r"\s", base_url):
        raise RequestError(f"BASE_URL={shown(base_url)} is not an http(s) URL, e.g. "
                           "https://<runai-host>/api/v1")
    return RunaiSettings(
        mount_name=name, mount_path=path, claim_name=claim, base_url=base_url,
        app_id=str(setting(env, "APP_ID")), project_name=str(setting(env, "PROJECT_NAME")),
        pvc_dir=pvc_dir, app_secret=str(setting(env, "APP_SECRET")),
    )
