"""A world for setup's sources step without the network: real git repositories built here,
a Megatron-Bridge recipe folder (bridge/llama3.1's metadata with these setup fields) pointing
at them, and a local Hugging Face Hub (http.server) that serves config.json as the Hub does.

    python tests/helpers/sourcesworld.py DIR [--clone-only]
                                                 builds the world under DIR (for bats) and
                                                 prints shell assignments: RECIPE, MB_COMMIT,
                                                 MB_NEWER, B200_MB_COMMIT, RUN_COMMIT, UPSTREAM;
                                                 --clone-only: Megatron-Bridge only (nothing
                                                 pip-installs, nothing from Hugging Face)
"""

from __future__ import annotations

import http.server
import os
import shlex
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
REPO_ID = "meta-llama/Meta-Llama-3-70B"
CONFIG = b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 8192}\n'
HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_CONFIG_NOSYSTEM": "1"}


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def commit_files(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo)


def make_repo(path: Path, commits: list[dict[str, str]]) -> list[str]:
    """A git repository at path with these commits on main; their ids, oldest first."""
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=path)
    return [commit_files(path, files, f"commit {i}") for i, files in enumerate(commits)]


# NeMo-Run's stand-in: a setuptools package under a name no venv has (installing a package
# named nemo_run where the project's own venv is visible would shadow its nemo-run).
PACKAGE = "llmb_pinned_probe"
RUN_PACKAGE = {
    "pyproject.toml": ('[build-system]\nrequires = ["setuptools>=61"]\n'
                       'build-backend = "setuptools.build_meta"\n'
                       f'[project]\nname = "{PACKAGE}"\nversion = "0.0.1"\n'
                       f'[tool.setuptools]\npackages = ["{PACKAGE}"]\n'),
    f"{PACKAGE}/__init__.py": "PINNED = True\n",
}


def make_venv(path: Path) -> str:
    """A venv without pip of its own (quick: no ensurepip) that sees this Python's packages
    (pip, setuptools) after its own; pip run with it installs into it. Its python."""
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], capture_output=True, text=True, check=True)
    borrowed = sysconfig.get_path("purelib")
    (Path(site.stdout.strip()) / "llmb-test-borrowed.pth").write_text(borrowed + "\n")
    return str(python)


@dataclass
class World:
    root: Path
    recipe: Path
    upstream: Path  # the "network": the repositories the recipe's urls name
    mb_commits: list[str] = field(default_factory=list)
    run_commits: list[str] = field(default_factory=list)

    @property
    def mb_commit(self) -> str:
        return self.mb_commits[0]  # pinned: an older commit than main's head

    @property
    def b200_commit(self) -> str:
        return self.mb_commits[1]


def build(root: Path) -> World:
    upstream = root / "upstream"
    mb = make_repo(upstream / "Megatron-Bridge.git",
                   [{"README.md": "bridge 1\n"}, {"README.md": "bridge 2\n"},
                    {"README.md": "bridge 3\n"}])
    run = make_repo(upstream / "Run.git", [RUN_PACKAGE, {f"{PACKAGE}/later.py": "X = 1\n"}])
    recipe = root / "recipes" / "bridgetest"
    recipe.mkdir(parents=True)
    data = yaml.safe_load((REPO / "bridge" / "llama3.1" / "metadata.yaml").read_text())
    data.update(
        recipe="bridgetest", workload="pretrain_bridgetest",
        framework={"name": "megatron-bridge", "version": "26.06.01"},
        image="nvcr.io/nvidia/nemo:26.06.01",
        repositories={
            "megatron_bridge": {"url": str(upstream / "Megatron-Bridge.git"), "commit": mb[0]},
            "nemo_run": {"url": str(upstream / "Run.git"), "commit": run[0]}},
        downloads={"huggingface": [{"repo_id": REPO_ID, "assets": ["config"]}]},
        gpu_overrides={"b200": {"image": "nvcr.io/nvidia/nemo:26.04.01", "repositories": {
            "megatron_bridge": {"url": str(upstream / "Megatron-Bridge.git"),
                                "commit": mb[1]}}}})
    (recipe / "metadata.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return World(root, recipe, upstream, mb, run)


def set_field(recipe: Path, update: dict[str, object]) -> None:
    """Change top-level fields of a world's recipe (a new folder: the catalog loads a folder
    once per process)."""
    data = yaml.safe_load((recipe / "metadata.yaml").read_text())
    data.update(update)
    (recipe / "metadata.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


@dataclass
class Hub:
    """What the local Hub saw: request paths and the Authorization headers."""

    endpoint: str = ""
    paths: list[str] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)


@contextmanager
def local_hub(configs: dict[str, bytes], status: int = 200) -> Iterator[Hub]:
    """A Hub on 127.0.0.1: /<repo_id>/resolve/<rev>/config.json with X-Repo-Commit."""
    seen = Hub()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.paths.append(self.path)
            seen.auth.append(self.headers.get("Authorization"))
            repo_id = self.path.lstrip("/").split("/resolve/")[0]
            if status != 200 or repo_id not in configs:
                self.send_response(status if status != 200 else 404)
                self.end_headers()
                return
            body = configs[repo_id]
            self.send_response(200)
            self.send_header("X-Repo-Commit", HUB_COMMIT)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


def seed_sources_hub(folder: Path) -> None:
    """An LLMB_SOURCES folder's huggingface/hub holding the world's config (as fill makes it)."""
    sys.path.insert(0, str(REPO / "common"))
    from llmb.install import hfcache

    hfcache.place(folder / "huggingface" / "hub", REPO_ID, "main", HUB_COMMIT, CONFIG)


if __name__ == "__main__":
    world = build(Path(sys.argv[1]))
    if sys.argv[2:] == ["--clone-only"]:  # no pip install, no Hugging Face: the shell's part
        data = yaml.safe_load((world.recipe / "metadata.yaml").read_text())
        del data["repositories"]["nemo_run"], data["downloads"]
        (world.recipe / "metadata.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    facts = {"RECIPE": str(world.recipe), "MB_COMMIT": world.mb_commit,
             "MB_NEWER": world.mb_commits[2], "B200_MB_COMMIT": world.b200_commit,
             "RUN_COMMIT": world.run_commits[0], "UPSTREAM": str(world.upstream)}
    print("\n".join(f"{k}={shlex.quote(v)}" for k, v in facts.items()))
