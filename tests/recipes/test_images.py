"""llmb.recipes.images: a registry reference -> the enroot URI, the pyxis form and the `.sqsh`
file name under $LLMB_INSTALL/images, and the four lines `python -m llmb.recipes.images`
prints for setup.sh."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from llmb.recipes import catalog, images
from paths import COMMON

# reference -> (registry, path, tag, enroot URI, pyxis form, file name)
REFERENCES = {
    "nvcr.io/nvidia/nemo:25.04.01": (
        "nvcr.io", "nvidia/nemo:25.04.01", "25.04.01", "docker://nvcr.io#nvidia/nemo:25.04.01",
        "nvcr.io#nvidia/nemo:25.04.01", "nvidia+nemo+25.04.01.sqsh"),
    "ubuntu:22.04": (
        None, "ubuntu:22.04", "22.04", "docker://ubuntu:22.04", "ubuntu:22.04",
        "ubuntu+22.04.sqsh"),
    "nvidia/cuda": (  # Docker Hub, no tag: latest
        None, "nvidia/cuda", "latest", "docker://nvidia/cuda:latest", "nvidia/cuda:latest",
        "nvidia+cuda+latest.sqsh"),
    "registry.example.com:5000/team/img:v2": (
        "registry.example.com:5000", "team/img:v2", "v2",
        "docker://registry.example.com:5000#team/img:v2", "registry.example.com:5000#team/img:v2",
        "team+img+v2.sqsh"),
    "registry:5000/img": (  # a port says registry even without a dot; the port is no tag
        "registry:5000", "img", "latest", "docker://registry:5000#img:latest",
        "registry:5000#img:latest", "img+latest.sqsh"),
    "localhost/my/img:1": (
        "localhost", "my/img:1", "1", "docker://localhost#my/img:1", "localhost#my/img:1",
        "my+img+1.sqsh"),
}


@pytest.mark.parametrize("reference", list(REFERENCES))
def test_a_reference_in_every_form(reference: str) -> None:
    image = images.Image(reference)
    assert (image.registry, image.path, image.tag, image.enroot_uri, image.pyxis,
            image.file_name) == REFERENCES[reference]


@pytest.mark.parametrize(("text", "reference"), [
    ("nvcr.io/nvidia/nemo:25.04.01", "nvcr.io/nvidia/nemo:25.04.01"),
    ("nvcr.io#nvidia/nemo:25.04.01", "nvcr.io/nvidia/nemo:25.04.01"),
    ("docker://nvcr.io#nvidia/nemo:25.04.01", "nvcr.io/nvidia/nemo:25.04.01"),
    ("docker://ubuntu:22.04", "ubuntu:22.04"),
    ("registry:5000#img:latest", "registry:5000/img:latest"),
])
def test_parse_takes_the_docker_and_the_enroot_form(text: str, reference: str) -> None:
    assert images.Image.parse(text) == images.Image(reference)


@pytest.mark.parametrize("reference", list(REFERENCES))
def test_the_enroot_and_pyxis_forms_read_back_as_the_same_image(reference: str) -> None:
    image = images.Image(reference)
    for form in (image.enroot_uri, image.pyxis):
        again = images.Image.parse(form)
        assert (again.enroot_uri, again.file_name) == (image.enroot_uri, image.file_name)


def test_every_recipe_shares_the_one_image_file() -> None:
    """The name setup.sh imports to and launch.sh hands to --container-image (the NeMo
    recipes'; a Megatron-Bridge recipe's is its own: test_bridge_catalog)."""
    for recipe in (r for r in catalog.all_recipes() if not r.is_bridge):
        for key in (recipe.name, recipe.workload):
            image = images.for_recipe(key)
            assert image == images.Image(recipe.image)
            assert image.file_name == "nvidia+nemo+25.04.01.sqsh", key
            assert image.enroot_uri == "docker://nvcr.io#nvidia/nemo:25.04.01"


@pytest.mark.parametrize(("argv", "lines"), [
    (["llama3.1"], ["docker://nvcr.io#nvidia/nemo:25.04.01", "nvidia+nemo+25.04.01.sqsh", "",
                    str(images.IMAGE_SPACE_GB)]),
    (["pretrain_nemotron4", "gb200"], ["docker://nvcr.io#nvidia/nemo:25.04.01",
                                       "nvidia+nemo+25.04.01.sqsh", "aarch64", "30"]),
    (["nemotronh", "h100"], ["docker://nvcr.io#nvidia/nemo:25.04.01",
                             "nvidia+nemo+25.04.01.sqsh", "x86_64", "30"]),
    (["nemotron", ""], ["docker://nvcr.io#nvidia/nemo:25.04.01", "nvidia+nemo+25.04.01.sqsh",
                        "", "30"]),  # setup.sh passes "${GPU_TYPE:-}"
])
def test_the_four_lines_setup_sh_reads(argv: list[str], lines: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert images.main(argv) == 0
    out = capsys.readouterr()
    assert out.out.split("\n") == [*lines, ""] and out.err == ""


@pytest.mark.parametrize(("argv", "code", "err"), [
    ([], 2, "usage: python3 -m llmb.recipes.images <recipe|workload> [gpu_type]"),
    (["a", "b", "c"], 2, "usage: python3 -m llmb.recipes.images <recipe|workload> [gpu_type]"),
    (["pretrain_gpt3"], 1, "llmb: recipe: unknown workload pretrain_gpt3; known: "
                           "pretrain_llama3.1, pretrain_nemotron4, pretrain_nemotronh, "
                           "pretrain_deepseek-v3, pretrain_gpt_oss, pretrain_kimi-k2, "
                           "pretrain_llama3.1-bridge, pretrain_nemotron-h, pretrain_nemotron_3, "
                           "pretrain_qwen3"),
    (["llama3.1", "a100"], 1, "llmb: GPU_TYPE: unknown GPU type a100; allowed: h100, b200, "
                              "gb200, h200, b300, gb300"),
])
def test_a_bad_request_is_one_line_and_prints_nothing_to_use(
        argv: list[str], code: int, err: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert images.main(argv) == code
    out = capsys.readouterr()
    assert out.out == "" and out.err == err + "\n"


def test_as_setup_sh_runs_it() -> None:
    """`python3 -m llmb.recipes.images` in a fresh process, with only common/ on the path."""
    env = {**os.environ, "PYTHONPATH": str(COMMON)}
    done = subprocess.run([sys.executable, "-m", "llmb.recipes.images", "nemotron", "gb200"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[1:3] == ["nvidia+nemo+25.04.01.sqsh", "aarch64"]
    bad = subprocess.run([sys.executable, "-m", "llmb.recipes.images", "nemotron", "v100"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("llmb: GPU_TYPE: unknown GPU type v100") and \
        bad.stderr.count("\n") == 1
