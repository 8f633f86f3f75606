"""llmb.analysis.plots: configurations grouped into families (same recipe / size / dtype / GPU type
/ scaling, different GPU counts), each family's title and file name, the scaling efficiency, and
the PNG matplotlib draws: a real PNG of the documented size whose panels are drawn, not blank.
tests/analysis/test_htmlreport.py checks the page the plots go into, in a real browser."""

from __future__ import annotations

import io
from typing import Any

import pytest
from llmb.analysis import plots

LLAMA = ("llama3.1", "8b", "fp8", "h100", "weak", False)
WIDTH, HEIGHT = (round(v * plots.DPI) for v in plots.SIZE)
BAND_ALPHA = 0.45  # the tolerance band is drawn translucent


def config(gpus: int, median: float | None = None, ref: float | None = None,
           mfu: float | None = None, tokens: float | None = None,
           spread: float = 0.0, **identity: Any) -> dict[str, Any]:
    """A configuration as llmb.analysis.verdicts.configurations reports it."""
    recipe, size, dtype, gpu, scaling, smoke = LLAMA
    base = {"recipe": recipe, "model_size": size, "dtype": dtype, "gpu_type": gpu,
            "scaling": scaling, "smoke_test": smoke, "num_gpus": gpus,
            "config_key": f"{recipe}/{size}/{dtype}/{gpu}/{gpus}gpu/{scaling}",
            "time_median": median, "reference_step_time": ref, "mfu_median": mfu,
            "tokens_per_second_median": tokens,
            "time_min": median - spread if median else None,
            "time_max": median + spread if median else None}
    return {**base, **identity}


@pytest.mark.parametrize(("key", "title", "slug"), [
    (LLAMA, "llama3.1 8b fp8 on h100, weak scaling", "llama3.1_8b_fp8_h100_weak"),
    (("nemotron", "340b", "bf16", "gb200", "strong", False),
     "nemotron 340b bf16 on gb200, strong scaling", "nemotron_340b_bf16_gb200_strong"),
    (("llama3.1", "8b", "fp8", "h100", None, False), "llama3.1 8b fp8 on h100, scaling unknown",
     "llama3.1_8b_fp8_h100"),
    (("nemotronh", "56b", "fp8", "h100", "weak", True),
     "nemotronh 56b fp8 on h100, weak scaling (smoke test)", "nemotronh_56b_fp8_h100_weak_smoke"),
    # whatever a manifest says, the file name is safe: no slash, no space, no dot-dot escape
    (("../x y", "8b/../..", "fp8", "h100", "weak", False), "../x y 8b/../.. fp8 on h100, weak "
     "scaling", ".._x_y_8b_.._.._fp8_h100_weak"),
    ((None, None, None, None, None, False), "None None None on None, scaling unknown", "plot"),
])
def test_a_familys_title_and_file_name(key: tuple[Any, ...], title: str, slug: str) -> None:
    assert plots.family_title(key) == title
    assert plots.slug(key) == slug
    assert "/" not in plots.slug(key)


def test_families_group_identified_configurations_by_gpu_count() -> None:
    b200 = config(16, 5.0, gpu_type="b200")
    configs = [config(32, 9.4), config(8, 9.3), b200, config(16, None, ref=9.36),
               config(64),  # neither a figure nor a reference: nothing to draw
               config(16, 9.3, recipe=None), config(0, 9.3)]
    groups = plots.families(configs)
    assert list(groups) == [LLAMA, plots.family_key(b200)]
    assert [c["num_gpus"] for c in groups[LLAMA]] == [8, 16, 32]
    assert groups[plots.family_key(b200)] == [b200]
    assert plots.families([]) == {}


@pytest.mark.parametrize(("configs", "points"), [
    # MFU at N GPUs over MFU at the smallest scale with a figure
    ([config(8, mfu=0.40), config(16, mfu=0.38), config(32, mfu=0.30)],
     [(8, 100.0), (16, 95.0), (32, 75.0)]),
    ([config(8), config(16, mfu=0.40), config(32, mfu=0.40)], [(16, 100.0), (32, 100.0)]),
    # no MFU (a smoke test): tokens/s per GPU instead
    ([config(2, tokens=1000.0), config(4, tokens=1800.0)], [(2, 100.0), (4, 90.0)]),
    ([config(8, 9.3)], []),
])
def test_scaling_efficiency(configs: list[dict[str, Any]], points: list[tuple[int, float]]
                            ) -> None:
    got = plots.efficiency(configs)
    assert [n for n, _ in got] == [n for n, _ in points]
    assert [v for _, v in got] == pytest.approx([v for _, v in points])


def pixels(png: bytes) -> Any:
    """The image as an RGB array (matplotlib reads PNGs with its own decoder)."""
    import numpy as np
    from matplotlib import image

    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    return np.asarray(image.imread(io.BytesIO(png), format="png"))[..., :3]


def colour_share(rgb: Any, hex_colour: str, alpha: float = 1.0) -> float:
    """How much of the image is (nearly) this colour, drawn with `alpha` on white."""
    import numpy as np

    want = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    want = alpha * want + (1 - alpha)
    return float((np.abs(rgb - want).max(axis=-1) < 0.03).mean())


FAMILY = [config(8, 9.40, ref=9.33, mfu=0.41, spread=0.05),
          config(16, 9.50, ref=9.36, mfu=0.40, spread=0.10),
          config(32, 9.90, ref=9.45, mfu=0.38, spread=0.02)]
RUNS = {c["config_key"]: [c["time_median"] - 0.05, c["time_median"], c["time_median"] + 0.05]
        for c in FAMILY}


@pytest.fixture(scope="module")
def family_png() -> bytes:
    return plots.figure_png(LLAMA, FAMILY, RUNS, 5.0)


def test_a_family_is_drawn_as_a_png_of_the_documented_size(family_png: bytes) -> None:
    rgb = pixels(family_png)
    assert rgb.shape == (HEIGHT, WIDTH, 3)
    assert rgb.std() > 0.05  # not one flat colour
    for part in ("median", "reference", "mfu", "efficiency", "run"):
        assert colour_share(rgb, plots.COLOURS[part]) > 1e-4, part
    assert colour_share(rgb, plots.COLOURS["band"], BAND_ALPHA) > 1e-3


def test_what_is_missing_is_left_out_not_drawn_empty() -> None:
    """A smoke-test family: no reference, no MFU; one scale only."""
    key = ("nemotronh", "56b", "fp8", "h100", "weak", True)
    only = [config(2, 0.05, tokens=9000.0, smoke_test=True)]
    rgb = pixels(plots.figure_png(key, only, {only[0]["config_key"]: [0.05]}, 5.0))
    assert rgb.shape == (HEIGHT, WIDTH, 3)
    assert colour_share(rgb, plots.COLOURS["median"]) > 1e-4
    for part in ("reference", "mfu"):
        assert colour_share(rgb, plots.COLOURS[part]) == 0, part
    assert colour_share(rgb, plots.COLOURS["band"], BAND_ALPHA) == 0


def test_a_reference_alone_draws_its_band() -> None:
    refs = [config(8, ref=9.33), config(16, ref=9.36)]
    rgb = pixels(plots.figure_png(LLAMA, refs, {}, 5.0))
    assert colour_share(rgb, plots.COLOURS["reference"]) > 1e-4
    assert colour_share(rgb, plots.COLOURS["band"], BAND_ALPHA) > 1e-3
    assert colour_share(rgb, plots.COLOURS["median"]) == 0


def test_the_same_family_draws_the_same_bytes(family_png: bytes) -> None:
    """No time stamp or software version in the file: a report can be compared by hash."""
    assert plots.figure_png(LLAMA, FAMILY, RUNS, 5.0) == family_png
