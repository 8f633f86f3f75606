"""Container image names: registry reference -> enroot URI and `.sqsh` file name.

metadata.yaml names the image as a registry reference (`nvcr.io/nvidia/nemo:25.04.01`). enroot
wants `docker://nvcr.io#nvidia/nemo:25.04.01`, and the imported file is named
`<org>+<name>+<tag>.sqsh` (`nvidia+nemo+25.04.01.sqsh`) under `$LLMB_INSTALL/images`.

`python3 -m llmb.recipes.images <recipe> [gpu_type]` prints, one per line, what setup.sh needs:
the enroot URI, the file name, the architecture to import for (empty: the host's) and the
documented disk estimate in GB. Bash reads the lines; it never parses YAML.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

# Documented free-space estimate for importing one NeMo 25.04.01 image (the .sqsh is ~20 GB,
# enroot needs scratch space while converting). setup.sh overrides it with LLMB_IMAGE_SPACE_GB.
IMAGE_SPACE_GB = 30


@dataclass(frozen=True)
class Image:
    reference: str  # nvcr.io/nvidia/nemo:25.04.01

    @classmethod
    def parse(cls, text: str) -> Image:
        """A registry reference in Docker form or in pyxis/enroot form
        (`nvcr.io#nvidia/nemo:25.04.01`, optionally `docker://` in front)."""
        text = text.removeprefix("docker://")
        registry, hash_, path = text.partition("#")
        return cls(f"{registry}/{path}" if hash_ else text)

    @property
    def pyxis(self) -> str:
        """The form srun --container-image takes: the registry before '#' (pyxis reads
        `nvcr.io/nvidia/nemo` as a Docker Hub repository named nvcr.io/nvidia/nemo)."""
        return self.enroot_uri.removeprefix("docker://")

    @property
    def registry(self) -> str | None:
        first, _, rest = self.reference.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            return first
        return None

    @property
    def path(self) -> str:
        """The repository path and tag without the registry: nvidia/nemo:25.04.01."""
        if self.registry is None:
            return self.reference
        return self.reference.split("/", 1)[1]

    @property
    def tag(self) -> str:
        name = self.path.rsplit("/", 1)[-1]
        return name.split(":", 1)[1] if ":" in name else "latest"

    @property
    def enroot_uri(self) -> str:
        path = self.path if ":" in self.path.rsplit("/", 1)[-1] else f"{self.path}:latest"
        return f"docker://{self.registry}#{path}" if self.registry else f"docker://{path}"

    @property
    def file_name(self) -> str:
        repo = self.path.rsplit(":", 1)[0] if ":" in self.path.rsplit("/", 1)[-1] else self.path
        return "+".join([*repo.split("/"), self.tag]) + ".sqsh"


def for_recipe(key: str) -> Image:
    from llmb.recipes import catalog

    return Image(catalog.find_recipe(key).image)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python3 -m llmb.recipes.images <recipe|workload> [gpu_type]", file=sys.stderr)
        return 2
    from llmb.recipes import catalog

    try:
        image = for_recipe(argv[0])
        arch = catalog.get_gpu_type(argv[1]).arch if len(argv) == 2 and argv[1] else ""
    except catalog.CatalogError as exc:
        var = "GPU_TYPE" if exc.field == "gpu_type" else "recipe"
        print(f"llmb: {var}: {exc}", file=sys.stderr)
        return 1
    print(image.enroot_uri, image.file_name, arch, IMAGE_SPACE_GB, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
