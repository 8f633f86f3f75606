"""What setup fetches for a recipe beyond the image, with or without the network.

A Megatron-Bridge recipe's metadata.yaml pins, per GPU type (`gpu_overrides.<gpu>` replaces the
image and individual repositories):

    image: nvcr.io/nvidia/nemo:26.06.01
    repositories: {megatron_bridge: {url: ..., commit: <40 hex>}, nemo_run: {url: ..., commit: ...}}
    downloads: {huggingface: [{repo_id: meta-llama/Meta-Llama-3-70B, assets: [config]}]}

`prepare` (common/setup.sh's `sources` step) clones each repository at its commit into
$LLMB_INSTALL/workloads/<workload>/<name> (Megatron-Bridge, Run), pip-installs the ones jobs
import from the login node (NeMo-Run) into the active venv from that checkout, and places each
model's config.json into HF_HOME ($LLMB_INSTALL/.cache/huggingface, llmb.install.hfcache). With
LLMB_SOURCES=DIR everything comes from DIR (<name>.git mirrors, huggingface/hub/), which
`fill` (common/setup.sh --fetch-sources DIR <recipe>...) makes on a machine with network.

    python3 -m llmb.install.sources facts RECIPE_DIR [GPU_TYPE]
    python3 -m llmb.install.sources prepare RECIPE_DIR [GPU_TYPE]
    python3 -m llmb.install.sources fill DIR RECIPE_DIR...

`facts` prints, one per line, what setup.sh needs: the workload key, the framework, the image's
enroot URI and .sqsh file name, the architecture to import for, the disk estimate in GB.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmb import layout
from llmb.install import gitrepos, hfcache
from llmb.install.gitrepos import Repo
from llmb.recipes import catalog, images
from llmb.shared import files, shellsafe, values
from llmb.shared.errors import LlmbError
from llmb.shared.values import shown

# Repositories a job imports from the login node: installed into the workload venv, by the
# distribution name pip records them under. The others are only cloned (the job mounts them).
PIP_DISTRIBUTIONS = {"nemo_run": "nemo_run"}
ASSETS = ("config",)
REPO_KEYS = {"url", "commit"}
HF_KEYS = {"repo_id", "assets", "revision"}
OVERRIDE_KEYS = {"image", "repositories"}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
SOURCES_HUB = "huggingface/hub"  # an LLMB_SOURCES folder's Hugging Face cache


class SourcesError(LlmbError):
    """A recipe's setup fields, or what they name, are wrong; one line with the fix."""


@dataclass(frozen=True)
class HfConfig:
    repo_id: str  # meta-llama/Meta-Llama-3-70B
    revision: str = "main"


@dataclass(frozen=True)
class Sources:
    """What setup fetches for one recipe on one GPU type, resolved once from metadata.yaml."""

    recipe: Path  # the recipe folder
    workload: str
    framework: str
    image: images.Image
    repos: tuple[Repo, ...]
    hf: tuple[HfConfig, ...]


def _mapping(where: str, data: object, keys: set[str] | None = None) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise SourcesError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if keys is not None and k not in keys)
    if unknown:
        raise SourcesError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: "
                           f"{', '.join(sorted(keys or ()))}")
    return data


def _text(where: str, value: object, pattern: re.Pattern[str] | None = None,
          hint: str = "") -> str:
    if not isinstance(value, str) or not value or values.control_characters(value):
        raise SourcesError(f"{where}={shown(value)} is not a text value{hint}")
    if pattern is not None and not pattern.fullmatch(value):
        raise SourcesError(f"{where}={shown(value)} is not allowed{hint}")
    return value


def _repositories(where: str, data: object) -> dict[str, Repo]:
    repos: dict[str, Repo] = {}
    for key, entry in _mapping(where, data).items():
        at = f"{where}.{key}"
        _text(at, key, NAME, " (a key such as megatron_bridge)")
        entry = _mapping(at, entry, REPO_KEYS)
        if set(entry) != REPO_KEYS:
            raise SourcesError(f"{at}: give both url and commit")
        url = _text(f"{at}.url", entry["url"], re.compile(r"[^\s'\"\\-][^\s'\"\\]*"),
                    " (a git URL without spaces or quotes, not starting with -)")
        commit = _text(f"{at}.commit", entry["commit"], hfcache.COMMIT,
                       " (a full 40-digit commit id in lower case, not a branch or a tag)")
        repo = Repo(str(key), url, commit)
        if not NAME.fullmatch(repo.name):
            raise SourcesError(f"{at}.url={shown(url)} does not end in a repository name")
        repos[str(key)] = repo
    return repos


def _unique_names(where: str, repos: Mapping[str, Repo]) -> None:
    names = [r.name for r in repos.values()]
    for name in names:
        if names.count(name) > 1:
            raise SourcesError(f"{where}: two repositories are named {name}; each is cloned "
                               "into a folder of its name")


def _downloads(where: str, data: object) -> tuple[HfConfig, ...]:
    entries = _mapping(where, data, {"huggingface"}).get("huggingface") or []
    if not isinstance(entries, list):
        raise SourcesError(f"{where}.huggingface: expected a list of {{repo_id, assets}}")
    found: list[HfConfig] = []
    for i, entry in enumerate(entries):
        at = f"{where}.huggingface[{i}]"
        entry = _mapping(at, entry, HF_KEYS)
        repo_id = _text(f"{at}.repo_id", entry.get("repo_id"),
                        re.compile(rf"{NAME.pattern}/{NAME.pattern}"), " (org/name)")
        if ".." in repo_id:
            raise SourcesError(f"{at}.repo_id={shown(repo_id)} is not allowed (org/name)")
        assets = entry.get("assets", list(ASSETS))
        if not isinstance(assets, list) or not all(a in ASSETS for a in assets):
            raise SourcesError(f"{at}.assets={shown(assets)} is not supported; allowed: "
                               f"{', '.join(ASSETS)}")
        revision = _text(f"{at}.revision", entry.get("revision", "main"), REVISION,
                         " (a branch, tag or commit)")
        if ".." in revision:
            raise SourcesError(f"{at}.revision={shown(revision)} is not allowed")
        found.append(HfConfig(repo_id, revision))
    return tuple(dict.fromkeys(found))


def resolve(recipe_dir: Path, gpu_type: str = "") -> Sources:
    """The recipe's setup facts for gpu_type ("" : the recipe-wide ones)."""
    recipe = catalog.load_recipe(recipe_dir)
    data, where = recipe.data, str(recipe.directory / "metadata.yaml")
    overrides = _mapping(f"{where}: gpu_overrides", data.get("gpu_overrides") or {})
    for gpu in overrides:
        if gpu not in catalog.gpu_types():
            raise SourcesError(f"{where}: gpu_overrides.{gpu} is not a GPU type; allowed: "
                               f"{', '.join(catalog.gpu_types())}")
    image = data["image"]
    repos = _repositories(f"{where}: repositories", data.get("repositories") or {})
    if gpu_type in overrides:
        at = f"{where}: gpu_overrides.{gpu_type}"
        override = _mapping(at, overrides[gpu_type], OVERRIDE_KEYS)
        image = override.get("image", image)
        repos |= _repositories(f"{at}.repositories", override.get("repositories") or {})
    _unique_names(f"{where}: repositories", repos)
    framework = data["framework"]
    name = framework.get("name") if isinstance(framework, Mapping) else framework
    return Sources(recipe=recipe.directory, workload=recipe.workload, framework=str(name),
                   image=images.Image.parse(_text(f"{where}: image", image)),
                   repos=tuple(repos.values()),
                   hf=_downloads(f"{where}: downloads", data.get("downloads") or {}))


def every_gpu(recipe_dir: Path) -> list[Sources]:
    """The recipe's setup facts for each GPU type it overrides, and the recipe-wide ones."""
    data = catalog.load_recipe(recipe_dir).data
    return [resolve(recipe_dir, gpu) for gpu in ["", *(data.get("gpu_overrides") or {})]]


# --- doing it ---------------------------------------------------------------------------------

def _log(out: Any, text: str) -> None:
    print(f"llmb-setup: {text}", file=out, flush=True)


def sources_folder(value: str | None) -> Path | None:
    """LLMB_SOURCES as a folder that exists, or None when it is unset or empty."""
    if not value:
        return None
    path = Path(values.require_printable("LLMB_SOURCES", value)).absolute()
    problem = files.path_problem(path, "directory")
    if problem:
        raise SourcesError(f"LLMB_SOURCES={shown(value)} {problem}; give the folder "
                           "common/setup.sh --fetch-sources filled, or unset it to use the "
                           "network")
    return path


def hf_token(environ: Mapping[str, str], install: Path | None) -> str | None:
    """The install's Hugging Face token: HF_TOKEN, else $LLMB_INSTALL/.hf_token (the
    installer's copy, 0600), else None. Checked, never shown."""
    token, source = environ.get("HF_TOKEN", "").strip(), "HF_TOKEN"
    stored = layout.Install(install).hf_token if install is not None else None
    if not token and stored is not None and stored.exists():
        token, source = files.read_token(stored), str(stored)
    return shellsafe.hf_token(source, token) if token else None


@dataclass
class Hub:
    """Where configs go (a Hugging Face hub cache) and where they come from."""

    target: Path
    sources: Path | None  # an LLMB_SOURCES folder, or None: HTTPS
    endpoint: str
    environ: Mapping[str, str]
    install: Path | None

    def ensure(self, cfg: HfConfig, out: Any) -> None:
        what = f"{cfg.repo_id} {hfcache.CONFIG_FILE} ({cfg.revision})"
        if hfcache.cached(self.target, cfg.repo_id, cfg.revision):
            _log(out, f"{what}: already in {self.target}; kept")
            return
        if self.sources is not None:
            hfcache.copy_from(self.sources / SOURCES_HUB, self.target, cfg.repo_id, cfg.revision,
                              f"LLMB_SOURCES={self.sources}")
            _log(out, f"{what}: placed from LLMB_SOURCES into {self.target}")
            return
        commit, content = hfcache.download(self.endpoint, cfg.repo_id, cfg.revision,
                                           hf_token(self.environ, self.install))
        hfcache.place(self.target, cfg.repo_id, cfg.revision, commit, content)
        _log(out, f"{what}: downloaded into {self.target} (commit {commit})")


def prepare(src: Sources, install: Path, environ: Mapping[str, str], python: str | None,
            out: Any = None) -> None:
    """The recipe's repositories at their commits in its workload folder, the pip-installed
    ones in python's venv, its models' configs in HF_HOME."""
    out = out or sys.stdout
    if not src.repos and not src.hf:
        return  # a recipe that pins nothing (the 25.04 NeMo recipes)
    tree = layout.Install(install)
    folder = sources_folder(environ.get("LLMB_SOURCES"))
    for repo in src.repos:
        dest = tree.workload(src.workload) / repo.name
        state = gitrepos.checkout(repo, dest, gitrepos.origin(repo, folder),
                                  f"repositories.{repo.key}")
        _log(out, f"{repo.name} at {repo.commit}: {state} ({dest})")
        dist = PIP_DISTRIBUTIONS.get(repo.key)
        if dist is None:
            continue
        if python is None:
            raise SourcesError(f"no Python venv is active to install {repo.name} into; "
                               "activate the workload venv (VIRTUAL_ENV) and run setup again")
        state = gitrepos.pip_install(python, dist, dest, repo,
                                     environ.get("LLMB_PIP_ARGS", "").split())
        _log(out, f"{dist} at {repo.commit}: {state} in {python}")
    hub = Hub(hfcache.hub(tree.hf_home), folder,
              environ.get("HF_ENDPOINT") or hfcache.DEFAULT_ENDPOINT, environ, install)
    for cfg in src.hf:
        hub.ensure(cfg, out)


def present(src: Sources, install: Path) -> bool:
    """Whether the disk holds what prepare makes: each checkout at its commit, each config in
    HF_HOME (the installer's `setup:<w>` step asks; pip's part is prepare's to check)."""
    tree = layout.Install(install)
    hub_dir = hfcache.hub(tree.hf_home)
    return (all(gitrepos.head(tree.workload(src.workload) / r.name) == r.commit
                for r in src.repos)
            and all(hfcache.cached(hub_dir, c.repo_id, c.revision) for c in src.hf))


def fill(folder: Path, recipe_dirs: list[Path], environ: Mapping[str, str],
         out: Any = None) -> None:
    """An LLMB_SOURCES folder for these recipes, every GPU type's repositories and configs."""
    out = out or sys.stdout
    folder.mkdir(parents=True, exist_ok=True)
    install = Path(environ["LLMB_INSTALL"]) if environ.get("LLMB_INSTALL") else None
    hub = Hub(folder / SOURCES_HUB, None, environ.get("HF_ENDPOINT") or hfcache.DEFAULT_ENDPOINT,
              environ, install)
    seen: set[object] = set()
    for recipe_dir in recipe_dirs:
        for src in every_gpu(recipe_dir):
            for repo in src.repos:
                if (repo.url, repo.commit) not in seen:
                    seen.add((repo.url, repo.commit))
                    state = gitrepos.mirror(repo, folder, f"repositories.{repo.key} of "
                                                          f"{src.recipe.name}")
                    _log(out, f"{repo.name}.git holds {repo.commit}: {state}")
            for cfg in src.hf:
                if cfg not in seen:
                    seen.add(cfg)
                    hub.ensure(cfg, out)
    _log(out, f"sources ready in {folder}; on the cluster: export LLMB_SOURCES={folder} "
              "before setup")


def facts_lines(src: Sources, gpu_type: str) -> list[str]:
    arch = catalog.get_gpu_type(gpu_type).arch if gpu_type else ""
    return [src.workload, src.framework, src.image.enroot_uri, src.image.file_name, arch,
            str(images.IMAGE_SPACE_GB)]


USAGE = ("usage: python3 -m llmb.install.sources facts|prepare RECIPE_DIR [GPU_TYPE] "
         "[--python PYTHON] | fill DIR RECIPE_DIR...")


def main(argv: list[str], environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    args = list(argv)
    python = None
    if "--python" in args:
        at = args.index("--python")
        python = args[at + 1] if at + 1 < len(args) else None
        del args[at:at + 2]
    if len(args) < 2 or args[0] not in ("facts", "prepare", "fill") or (
            args[0] != "fill" and len(args) > 3):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if args[0] == "fill":
            fill(Path(args[1]).absolute(), [Path(a) for a in args[2:]], env)
            return 0
        gpu = args[2] if len(args) == 3 else ""
        src = resolve(Path(args[1]), gpu)
        if args[0] == "facts":
            print(*facts_lines(src, gpu), sep="\n")
        else:
            prepare(src, Path(env["LLMB_INSTALL"]), env, python or None)
    except catalog.CatalogError as err:
        print(f"llmb: {'GPU_TYPE' if err.field == 'gpu_type' else 'recipe'}: {err}",
              file=sys.stderr)
        return 1
    except (LlmbError, OSError) as err:
        print(f"llmb: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
