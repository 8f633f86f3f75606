"""Hugging Face model configs in the cache layout that offline `transformers` and
`huggingface_hub` read (HF_HOME=$LLMB_INSTALL/.cache/huggingface, HF_HUB_OFFLINE=1):

    <HF_HOME>/hub/models--<org>--<name>/
      blobs/<git blob sha1 of the file>          the bytes
      snapshots/<commit>/config.json             a relative link to ../../blobs/<sha1>
      refs/<revision>                            the commit <revision> (main) names

A config comes from an LLMB_SOURCES folder (its huggingface/hub/ is the same layout, filled by
`common/setup.sh --fetch-sources`) or over HTTPS from HF_ENDPOINT (default
https://huggingface.co) with the user's token, which is sent to that host only (never to a host
a redirect names) and never printed. Standard library only: huggingface_hub is not a
requirement of the login-node venv.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from llmb.shared import files
from llmb.shared.errors import LlmbError

DEFAULT_ENDPOINT = "https://huggingface.co"
CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 4 << 20  # a model's config.json is a few KB
TIMEOUT_S = 60
COMMIT = re.compile(r"[0-9a-f]{40}")


class HfError(LlmbError):
    """A config that cannot be placed; str(error) is one line naming the model and the fix."""


def hub(hf_home: Path) -> Path:
    """The hub cache under an HF_HOME (HF_HUB_CACHE)."""
    return hf_home / "hub"


def model_folder(hub_dir: Path, repo_id: str) -> Path:
    return hub_dir / ("models--" + repo_id.replace("/", "--"))


def cached(hub_dir: Path, repo_id: str, revision: str) -> tuple[str, Path] | None:
    """(commit, config.json) when this cache holds the config of repo_id at revision."""
    folder = model_folder(hub_dir, repo_id)
    commit = revision
    if not COMMIT.fullmatch(revision):
        try:
            commit = files.read_text(folder / "refs" / revision, 256).strip()
        except files.FileRefused:
            return None
        if not COMMIT.fullmatch(commit):
            return None
    config = folder / "snapshots" / commit / CONFIG_FILE
    return (commit, config) if config.is_file() else None


def blob_name(content: bytes) -> str:
    """The name the Hub gives a small file's blob (its ETag): the git blob SHA-1."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def place(hub_dir: Path, repo_id: str, revision: str, commit: str, content: bytes) -> Path:
    """Write config.json of repo_id at commit (and refs/<revision> -> commit); its path."""
    folder = model_folder(hub_dir, repo_id)
    name = blob_name(content)
    for sub in ("blobs", f"snapshots/{commit}", "refs"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    files.atomic_write(folder / "blobs" / name, content)
    link = folder / "snapshots" / commit / CONFIG_FILE
    tmp = link.with_name(f".{CONFIG_FILE}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(f"../../blobs/{name}", tmp)
    os.replace(tmp, link)
    if revision != commit:
        (folder / "refs" / revision).parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(folder / "refs" / revision, commit)
    return link


def copy_from(source_hub: Path, hub_dir: Path, repo_id: str, revision: str,
              where: str) -> Path:
    """The config from another cache (an LLMB_SOURCES folder's huggingface/hub) into hub_dir."""
    found = cached(source_hub, repo_id, revision)
    if found is None:
        raise HfError(f"{where} has no {CONFIG_FILE} of {repo_id} (revision {revision}) under "
                      f"{source_hub}; fill it on a machine with network: common/setup.sh "
                      "--fetch-sources DIR <recipe>...")
    commit, config = found
    try:
        content = files.read_bounded(config, MAX_CONFIG_BYTES)
    except files.FileRefused as err:
        raise HfError(f"{where}: {config} {err}") from None
    return place(hub_dir, repo_id, revision, commit, content)


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Follows a redirect, but carries the token only to the host it was meant for."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and (urllib.parse.urlsplit(newurl).netloc
                                != urllib.parse.urlsplit(req.full_url).netloc):
            new.remove_header("Authorization")
        return new


def download(endpoint: str, repo_id: str, revision: str, token: str | None) -> tuple[str, bytes]:
    """(commit, content) of config.json of repo_id at revision, over HTTPS."""
    quoted = urllib.parse.quote(revision, safe="")
    url = f"{endpoint.rstrip('/')}/{repo_id}/resolve/{quoted}/{CONFIG_FILE}"
    request = urllib.request.Request(url, headers={"User-Agent": "llmb-setup"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(_SameHostAuth)
    try:
        with opener.open(request, timeout=TIMEOUT_S) as answer:
            content = answer.read(MAX_CONFIG_BYTES + 1)
            commit = (answer.headers.get("X-Repo-Commit") or "").strip()
    except urllib.error.HTTPError as err:
        raise HfError(_refusal(err.code, repo_id, url, token is not None)) from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise HfError(f"cannot download {url}: {reason}; on a machine without network, fill a "
                      "folder with common/setup.sh --fetch-sources DIR <recipe> where there is "
                      "network and set LLMB_SOURCES=DIR here") from None
    if len(content) > MAX_CONFIG_BYTES:
        raise HfError(f"{url} is larger than {MAX_CONFIG_BYTES} bytes; not a model config")
    if not COMMIT.fullmatch(commit):
        if not COMMIT.fullmatch(revision):
            raise HfError(f"{url} answered without an X-Repo-Commit header naming a commit; "
                          "is HF_ENDPOINT a Hugging Face Hub?")
        commit = revision
    return commit, content


def _refusal(code: int, repo_id: str, url: str, with_token: bool) -> str:
    if code in (401, 403):
        how = ("the token (HF_TOKEN, or $LLMB_INSTALL/.hf_token) has no access to it: accept "
               f"the model's terms at https://huggingface.co/{repo_id} with that account"
               if with_token else
               "it needs a token: export HF_TOKEN (huggingface.co/settings/tokens) or run the "
               "installer, which stores it in $LLMB_INSTALL/.hf_token")
        return f"Hugging Face refused {repo_id} (HTTP {code}): {how}"
    if code == 404:
        return (f"Hugging Face has no {CONFIG_FILE} at {url} (HTTP 404); check the repo_id and "
                "revision under downloads.huggingface in the recipe's metadata.yaml")
    return f"downloading {url} failed (HTTP {code}); run setup again later"
