"""Performance math against every worked example and every derived cell of the seeds.

Model FLOPs per sample: Llama (003) and Nemotron-4 (004) use the grouped-query-aware formula;
the older Nemotron-4 documents (001 and 002) print 434.5e12 (15b) and 1.01e16 (340b), which
come from the same formula with query groups = heads, i.e. ignoring grouped-query attention.
Their tables were computed with those figures, so this file checks them with gqa=False and says
so where it does. Tolerance: 0.5% everywhere; the cells that miss it are listed by name below
with the value the arithmetic gives and why, and each must keep missing it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import seedtables
from llmb.recipes import catalog, perf
from seedtables import PerfCell

TOLERANCE = 0.005
RECIPE_OF_SEED = {"000": "nemotronh", "001": "nemotron", "002": "nemotron", "003": "llama3.1"}
NON_GQA_SEEDS = ("001", "002")  # the older Nemotron-4 figure, see the module docstring


def recipe(name: str) -> catalog.Recipe:
    return catalog.find_recipe(name)


def shape(name: str, size: str, **override: int) -> dict[str, int]:
    return {**recipe(name).size(size)["model"], **override}


def relative_miss(computed: float, published: float) -> float:
    return abs(computed / published - 1)


def significant(text: str) -> int:
    """Significant digits of a printed number: '4.74E+14' -> 3, '434.5e12' -> 4."""
    mantissa = re.split(r"[eE]", text.replace(",", ""))[0].replace(".", "").lstrip("0")
    return len(mantissa)


def as_printed(value: float, text: str) -> bool:
    """value, rounded to as many significant digits as `text` prints, reads as `text`."""
    printed = float(text.replace(",", ""))
    return float(f"{value:.{significant(text) - 1}e}") == printed


def printed_after_equals(fragment: str) -> str:
    """The number a worked-example line ends with: '... = 30.93%' -> '30.93'."""
    tail = fragment.rsplit("=", 1)[1]
    return re.search(r"[0-9][0-9.,]*(?:[eE][+-]?\d+)?", tail).group(0)


# --- peak TFLOPS --------------------------------------------------------------------------------

def test_peak_table_is_004s():
    (table,) = [t for t in seedtables.tables("004") if t.header[0] == "Data Type"]
    for record in table.records():
        dtype = record["Data Type"].lower()
        for gpu in ("h100", "b200", "gb200"):
            assert catalog.get_gpu_type(gpu).peak_tflops[dtype] == float(record[gpu.upper()])
    assert {g: dict(catalog.get_gpu_type(g).peak_tflops) for g in catalog.gpu_types()} == {
        "h100": {"bf16": 989, "fp8": 1979}, "b200": {"bf16": 2250, "fp8": 4500, "nvfp4": 9000},
        "gb200": {"bf16": 2450, "fp8": 4900, "nvfp4": 10000},
        # not in seed 004 (nor is any nvfp4 peak): each with its public source in gpus.yaml
        "h200": {"bf16": 989, "fp8": 1979}, "b300": {"bf16": 2250, "fp8": 4500, "nvfp4": 13500},
        "gb300": {"bf16": 2450, "fp8": 4900, "nvfp4": 15000}}


@pytest.mark.parametrize(("dtype", "gpu", "peak"), [
    ("bf16", "h100", 989), ("fp8", "h100", 1979), ("mxfp8", "b200", 4500),
    ("fp8_cs", "gb200", 4900), ("fp8cs", "h100", 1979), ("FP8_MX", "b300", 4500),
    ("nvfp4", "b200", 9000), ("nvfp4", "gb300", 15000),
    ("nvfp4", "h100", None),  # Hopper has no FP4 tensor cores: no peak, no MFU
    ("fp16", "h100", None),  # a dtype the rule does not know
])
def test_the_peak_a_dtype_is_held_to(dtype: str, gpu: str, peak: float | None):
    assert perf.peak_tflops(catalog.get_gpu_type(gpu).peak_tflops, dtype) == peak


def test_a_gpu_type_is_resolved_once_and_carries_its_facts():
    gb200 = catalog.get_gpu_type("gb200")
    assert (gb200.gpus_per_node, gb200.segment_max_nodes) == (4, 18)
    assert (gb200.memory_gbps, gb200.nvlink_gbps) == (8000, 900)
    assert gb200 == catalog.get_gpu_type("gb200") and gb200 != catalog.get_gpu_type("h100")
    cfg = catalog.find_recipe("nemotron").rows(gpu_type="gb200")[0]
    assert cfg.gpu == gb200 and cfg.gpu_type == "gb200"


@pytest.mark.parametrize("seed", ["000", "001", "002", "003"])
def test_older_seeds_h100_peaks_agree(seed: str):
    peaks = catalog.get_gpu_type("h100").peak_tflops
    text = seedtables.seed_text(seed)
    for dtype in ("FP8", "BF16"):
        found = re.findall(rf"H100 {dtype} is \**(\d+)\**", text)
        assert found or (seed == "000" and dtype == "BF16")  # 000 is FP8 only
        assert all(float(v) == peaks[dtype.lower()] for v in found)


# --- model FLOPs: every worked example with its intermediates ----------------------------------

def gpt_terms(name: str, size: str, gqa: bool = True) -> dict[str, float]:
    r = recipe(name)
    return perf.gpt_flops_terms(r.family, shape(name, size), r.seq_length, gqa=gqa)


def nemotronh_blocks() -> dict[str, int]:
    return perf.nemotronh_flops_blocks(shape("nemotronh", "56b"), 8192)


def non_gqa_flops(size: str) -> float:
    return perf.model_flops("nemotron4", shape("nemotron", size), 4096, gqa=False)


# (seed, the line as the seed prints it, our value). The printed number after the last `=` is
# checked exactly when printed in full, else to the digits printed (4.74E+14: three).
FLOPS_EXAMPLES: list[tuple[str, str, Callable[[], float]]] = [
    ("003", "attention flops = 12 * 32 * 4096^2 * (1 + 8/32 + 8192/4096) = 20,937,965,568",
     lambda: gpt_terms("llama3.1", "8b")["attention"]),
    ("003", "mlp flops = 18 * 32 * 14336 * 4096 = 33,822,867,456",
     lambda: gpt_terms("llama3.1", "8b")["mlp"]),
    ("003", "embedding flops = 6 * 128256 * 4096 = 3,152,019,456",
     lambda: gpt_terms("llama3.1", "8b")["embedding"]),
    ("003", "model flops = 8192 * (20,937,965,568 + 33,822,867,456 + 3,152,019,456) = 4.74E+14",
     lambda: recipe("llama3.1").model_flops("8b")),
    ("004", "+ 9,663,676,416 = 26,575,110,144", lambda: gpt_terms("nemotron", "15b")["attention"]),
    ("004", "mlp flops = 12 * 32 * 6144 * 24576 = 57,982,058,496",
     lambda: gpt_terms("nemotron", "15b")["mlp"]),
    ("004", "embedding flops = 6 * 256000 * 6144 = 9,437,184,000",
     lambda: gpt_terms("nemotron", "15b")["embedding"]),
    ("004", "= 4096 * 93,994,352,640 = 3.85e14", lambda: recipe("nemotron").model_flops("15b")),
    ("004", "+ 86,973,087,744 = 510,966,890,496",
     lambda: gpt_terms("nemotron", "340b")["attention"]),
    ("004", "mlp flops = 12 * 96 * 18432 * 73728 = 1,565,515,579,392",
     lambda: gpt_terms("nemotron", "340b")["mlp"]),
    ("004", "embedding flops = 6 * 256000 * 18432 = 28,311,552,000",
     lambda: gpt_terms("nemotron", "340b")["embedding"]),
    ("004", "+ 28,311,552,000) = 8.62124e15", lambda: recipe("nemotron").model_flops("340b")),
    # 001/002: the older, non-GQA Nemotron-4 figures (attention counted with groups = heads)
    ("001", "mlp flops = 48 * 32 * 6144^2 = 57982058496",
     lambda: gpt_terms("nemotron", "15b", gqa=False)["mlp"]),
    ("001", "embedding flops = 6 * 256000 * 6144 = 9437184000",
     lambda: gpt_terms("nemotron", "15b", gqa=False)["embedding"]),
    ("001", "= 434,526,299,070,464 = 434.5e12", lambda: non_gqa_flops("15b")),
    ("002", "attention flops = 24 * 96 * 18432^2 + 12 * 96 * 18432 * 4096 = 869730877440",
     lambda: gpt_terms("nemotron", "340b", gqa=False)["attention"]),
    ("002", "mlp flops = 48 * 96 * 18432^2 = 1565515579392",
     lambda: gpt_terms("nemotron", "340b", gqa=False)["mlp"]),
    ("002", "embedding flops = 6 * 256000 * 18432 = 28311552000",
     lambda: gpt_terms("nemotron", "340b", gqa=False)["embedding"]),
    ("002", "+ 28311552000) = 1.01e16", lambda: non_gqa_flops("340b")),
    # 000: Nemotron-H, each block (exact integers) and the total
    ("000", "* 54 = 237,494,511,599,616", lambda: nemotronh_blocks()["mlp"]),
    ("000", "* 10 = 23,364,622,090,240", lambda: nemotronh_blocks()["attention"]),
    ("000", "* 54 = 199,690,209,460,224", lambda: nemotronh_blocks()["mamba"]),
    ("000", "lm_head_flops = 8192 * 8192 * 131072 = 8,796,093,022,208",
     lambda: nemotronh_blocks()["lm_head"]),
    ("000", "* 6 = 2.816e15", lambda: recipe("nemotronh").model_flops("56b")),
]


@pytest.mark.parametrize(("seed", "fragment", "ours"), FLOPS_EXAMPLES,
                         ids=[f"{s}:{f[-28:]}" for s, f, _ in FLOPS_EXAMPLES])
def test_flops_worked_example(seed: str, fragment: str, ours: Callable[[], float]):
    assert fragment in seedtables.seed_text(seed)
    printed = printed_after_equals(fragment)
    if "," in printed or significant(printed) >= 10:  # printed in full: exact
        assert ours() == pytest.approx(float(printed.replace(",", "")), rel=1e-12, abs=0)
    else:
        assert as_printed(ours(), printed), f"{ours():.6e} does not read as {printed}"


def test_004s_attention_parts():
    """004 prints the GQA attention term in three parts: layers x h^2, the query-group share,
    the sequence share (12 x L x h^2 x (1 + g/n + s/h))."""
    text = seedtables.seed_text("004")
    for size, parts in (("15b", "14,495,514,624 + 2,415,919,104 + 9,663,676,416"),
                        ("340b", "391,378,894,848 + 32,614,907,904 + 86,973,087,744")):
        m = shape("nemotron", size)
        base = 12 * m["num_layers"] * m["hidden_size"] ** 2
        ours = (base, base * m["num_query_groups"] // m["num_attention_heads"],
                12 * m["num_layers"] * m["hidden_size"] * 4096)
        assert parts == " + ".join(f"{p:,}" for p in ours)
        assert parts in text
        assert sum(ours) == pytest.approx(gpt_terms("nemotron", size)["attention"], rel=1e-12)
    # and the 15b line's per-token sum before x 4096
    assert "= 4096 * 93,994,352,640 =" in text
    assert sum(gpt_terms("nemotron", "15b").values()) == pytest.approx(93_994_352_640, rel=1e-12)


def test_001s_attention_intermediate_is_a_seed_erratum():
    """001 prints `24 * 32 * 6144^2 + 12 * 32 * 6144 * 4096 = 38666279738`; that expression is
    38,654,705,664 (ours). Its total 434,526,299,070,464 carries the slip (4096 x the sum with
    38,666,279,738); the exact non-GQA figure is 434,478,891,663,360. Both print as 434.5e12,
    which is what 001's tables use, so the slip changes no published cell."""
    line = "attention flops = 24 * 32 * 6144^2 + 12 * 32 * 6144 * 4096 = 38666279738"
    assert line in seedtables.seed_text("001")
    expression = 24 * 32 * 6144**2 + 12 * 32 * 6144 * 4096
    assert expression == 38_654_705_664 != 38_666_279_738
    assert gpt_terms("nemotron", "15b", gqa=False)["attention"] == expression
    assert 4096 * (38_666_279_738 + 57_982_058_496 + 9_437_184_000) == 434_526_299_070_464
    assert non_gqa_flops("15b") == 434_478_891_663_360


def test_the_older_nemotron4_figures_ignore_grouped_query_attention():
    """README note: 001/002's 434.5e12 and 1.01e16 count attention as if every head had its own
    key/value projection; with Nemotron-4's 8 query groups the figures are 3.85e14 and 8.62e15
    (004). The older figures are 12.9% and 17.0% higher."""
    nemotron = recipe("nemotron")
    assert non_gqa_flops("15b") / nemotron.model_flops("15b") == pytest.approx(1.1285, abs=5e-4)
    assert non_gqa_flops("340b") / nemotron.model_flops("340b") == pytest.approx(1.1705, abs=5e-4)
    # with groups = heads the two readings are one formula
    assert non_gqa_flops("340b") == perf.model_flops(
        "nemotron4", shape("nemotron", "340b", num_query_groups=96), 4096)


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown model family 'gpt'"):
        perf.model_flops("gpt", shape("llama3.1", "8b"), 8192)


# --- throughput, days and MFU: every worked example line ----------------------------------------

@dataclass(frozen=True)
class Worked:
    seed: str
    fragment: str  # as the seed prints it
    ours: Callable[[], float]  # from the numbers on the line, through perf
    catalog: Callable[[], float] | None = None  # the same from the catalog's own figures


def mfu_percent(gbs: int, flops: float, step: float, gpus: int, peak: float) -> float:
    return 100 * perf.mfu(gbs, flops, step, gpus, peak)


def catalog_mfu(name: str, size: str, dtype: str, gpus: int, step: float,
                gqa: bool = True, gbs: int | None = None) -> float:
    r = recipe(name)
    config = r.resolve(size, dtype, "h100", gpus)
    flops = perf.model_flops(r.family, shape(name, size), r.seq_length, gqa=gqa)
    peak = catalog.get_gpu_type("h100").peak_tflops[dtype]
    return mfu_percent(gbs or config.gbs, flops, step, gpus, peak)


WORKED = [
    # 000: Nemotron-H 56b FP8, 256 GPUs, GBS 768
    Worked("000", "E.g. 8192 * 768 / 15.892  = 395888",
           lambda: perf.tokens_per_second(8192, 768, 15.892)),
    # (000 then divides by 395895, not the 395888 it just computed; both give 29.24 days)
    Worked("000", "E.g. 1e12 / 395895 / 86400 = 29.24 days", lambda: perf.days_to_train(395895),
           lambda: perf.days_to_train(perf.tokens_per_second(8192, 768, 15.892))),
    Worked("000", "MFU = 768 * 2.816e15 / 15.892 / 256 / 1979e+12 = 26.86%",
           lambda: mfu_percent(768, 2.816e15, 15.892, 256, 1979),
           lambda: catalog_mfu("nemotronh", "56b", "fp8", 256, 15.892)),
    # 001: Nemotron-4 15b BF16, 64 GPUs, GBS 256, older non-GQA figure 434.5e12
    Worked("001", "E.g. 4096 * 256 / 2.693 = 389371",
           lambda: perf.tokens_per_second(4096, 256, 2.693)),
    Worked("001", "E.g. 1e12 / 389371 / 86400 = 29.7 days", lambda: perf.days_to_train(389371)),
    Worked("001", "MFU = 256 * 434.5e12 / 2.693 / 64 / 989e+12 = 65.26%",
           lambda: mfu_percent(256, 434.5e12, 2.693, 64, 989),
           lambda: catalog_mfu("nemotron", "15b", "bf16", 64, 2.693, gqa=False)),
    # 002: Nemotron-4 340b BF16, 128 GPUs, GBS 32, older non-GQA figure 1.01e16. The example's
    # 4.77 s is not its table's 4.61 s at 128 GPUs (55.38%); the arithmetic holds either way.
    Worked("002", "E.g. 4096 * 256 / 3.59 = 292082",
           lambda: perf.tokens_per_second(4096, 256, 3.59)),
    Worked("002", "E.g. 1e12 / 292082 / 86400 = 39.6 days", lambda: perf.days_to_train(292082)),
    Worked("002", "MFU = 32 * 1.01e16 / 4.77 / 128 / 989e+12 = 53.52%",
           lambda: mfu_percent(32, 1.01e16, 4.77, 128, 989),
           lambda: catalog_mfu("nemotron", "340b", "bf16", 128, 4.77, gqa=False)),
    # 003: Llama 3.1 8b FP8, 8 GPUs, GBS 128
    Worked("003", "E.g. 8192 * 128 / 12.39 = 84631",
           lambda: perf.tokens_per_second(8192, 128, 12.39)),
    Worked("003", "E.g. 1e12 / 84631 / 86400 = 136.76 days", lambda: perf.days_to_train(84631),
           lambda: perf.days_to_train(perf.tokens_per_second(8192, 128, 12.39))),
    Worked("003", "MFU = 128 * 4.74E+14 / 12.39 / 8 / 1979E+12 = 30.93%",
           lambda: mfu_percent(128, 4.74e14, 12.39, 8, 1979),
           lambda: catalog_mfu("llama3.1", "8b", "fp8", 8, 12.39)),
    # 004: Nemotron-4 15b BF16, 64 GPUs, GBS 256, the GQA figure 3.85e14
    Worked("004", "E.g. 4096 * 256 / 2.693 = 389371",
           lambda: perf.tokens_per_second(4096, 256, 2.693)),
    Worked("004", "E.g. 1e12 / 389371 / 86400 = 29.7 days", lambda: perf.days_to_train(389371)),
    Worked("004", "MFU = 256 * 3.85e14 / 2.693 / 64 / 989e+12 = 57.82%",
           lambda: mfu_percent(256, 3.85e14, 2.693, 64, 989),
           lambda: catalog_mfu("nemotron", "15b", "bf16", 64, 2.693)),
]


@pytest.mark.parametrize("example", WORKED, ids=lambda w: f"{w.seed}:{w.fragment[:40]}")
def test_worked_example(example: Worked):
    assert example.fragment in seedtables.seed_text(example.seed)
    printed = printed_after_equals(example.fragment)
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    assert round(example.ours(), decimals) == float(printed)
    if example.catalog is not None:  # the catalog's exact FLOPs, GBS and peak: within 0.5%
        assert relative_miss(example.catalog(), float(printed)) <= TOLERANCE


def test_worked_examples_use_the_catalogs_gbs():
    """Each example's GBS is the resolved one at its scale."""
    assert recipe("nemotronh").resolve("56b", "fp8", "h100", 256).gbs == 768
    assert recipe("nemotron").resolve("15b", "bf16", "h100", 64).gbs == 256
    assert recipe("nemotron").resolve("340b", "bf16", "h100", 128).gbs == 32
    assert recipe("llama3.1").resolve("8b", "fp8", "h100", 8).gbs == 128


@pytest.mark.parametrize(("seed", "line_start", "name", "args", "gbs"), [
    # 004's parse_train_timing example: 340b fp8, 128 GB200, strong scaling (GBS 512)
    ("004", "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp4_cp1_vp12_mbs1_gbs512_389757",
     "nemotron", ("340b", "fp8", "gb200", 128, "strong"), 512),
    # 000's example (its name says gbs768, a typo: see test_catalog): the TFLOPS it prints
    # (which 000 calls invalid) only work out with GBS 384, 000's table value at 128 GPUs.
    ("000", "pretrain_nemotronh_56b_fp8_gpus128_tp8_pp1_cp1_vpNone_mbs1_gbs768",
     "nemotronh", ("56b", "fp8", "h100", 128), 384),
])
def test_tflops_per_gpu_of_the_example_outputs(seed, line_start, name, args, gbs):
    (line,) = [ln for ln in seedtables.seed_text(seed).splitlines()
               if ln.startswith(line_start)]
    _, status, step, _, tflops, _ = line.split()
    config = recipe(name).resolve(*args)
    assert status == "Success" and config.gbs == gbs
    ours = perf.tflops_per_gpu(config.gbs, recipe(name).model_flops(args[0]), float(step),
                               config.num_gpus)
    assert relative_miss(ours, float(tflops)) <= TOLERANCE
    if seed == "000":  # with the name's GBS the TFLOPS would be twice the printed figure
        assert relative_miss(ours * 2, float(tflops)) > 0.9


# --- every derived cell of every Expected Performance table --------------------------------------

CELLS = [c for c in seedtables.all_performance_cells() if c.quantity != "step_time"]
N_A = {("003", "405b", dtype, gpus, "days") for dtype in ("bf16", "fp8") for gpus in (32, 64, 128)}
# 003's 405b MFU cells, proxies and full model alike, are ~0.9% above what 003's own formula
# gives for Llama 3.1 405b (128 heads, 8 query groups): they reproduce to 0.1% only with a query
# groups / heads ratio of 1/8 instead of 1/16 (test below). A seed erratum: our value kept.
# Key -> (published %, ours %).
ERRATA = {
    ("003", "405b", "bf16", 32, "mfu"): (55.23, 54.76),
    ("003", "405b", "bf16", 64, "mfu"): (52.52, 52.05),
    ("003", "405b", "bf16", 128, "mfu"): (55.31, 54.81),
    ("003", "405b", "bf16", 512, "mfu"): (55.47, 54.97),
    ("003", "405b", "bf16", 1024, "mfu"): (55.31, 54.81),
    ("003", "405b", "bf16", 2048, "mfu"): (55.22, 54.72),
    ("003", "405b", "fp8", 32, "mfu"): (42.24, 41.86),
    ("003", "405b", "fp8", 64, "mfu"): (41.97, 41.57),
    ("003", "405b", "fp8", 128, "mfu"): (44.55, 44.12),
    ("003", "405b", "fp8", 512, "mfu"): (44.35, 43.93),
    ("003", "405b", "fp8", 1024, "mfu"): (44.17, 43.75),
    ("003", "405b", "fp8", 2048, "mfu"): (43.68, 43.26),
}
# 002 prints days to train as whole numbers; at 2048 GPUs half a day is more than 0.5% of the
# value, so these two are read at the precision printed: ours rounds to the printed figure.
WHOLE_DAYS = {
    ("002", "340b", "bf16", 2048, "days"): (27, 26.71),
    ("002", "340b", "fp8", 2048, "days"): (19, 19.26),
}


def cell_key(cell: PerfCell) -> tuple[str, str, str, int, str]:
    return cell.seed, cell.size, cell.dtype, cell.gpus, cell.quantity


def computed(cell: PerfCell, **shape_override: int) -> float:
    """The cell from its column's step time, the resolved GBS and layers, the model FLOPs
    (001/002: the older non-GQA figure) and the peak from gpus.yaml."""
    name = RECIPE_OF_SEED[cell.seed]
    r = recipe(name)
    config = r.resolve(cell.size, cell.dtype, cell.gpu_type, cell.gpus)
    step = next(c.value for c in seedtables.performance_cells(cell.seed)
                if c.key == cell.key and c.quantity == "step_time")
    tokens = perf.tokens_per_second(r.seq_length, config.gbs, step)
    if cell.quantity == "tokens_per_s":
        return tokens
    if cell.quantity == "days":
        return perf.days_to_train(tokens)
    model = shape(name, cell.size, **{"num_layers": config.num_layers, **shape_override})
    flops = perf.model_flops(r.family, model, r.seq_length, gqa=cell.seed not in NON_GQA_SEEDS)
    peak = catalog.get_gpu_type(cell.gpu_type).peak_tflops[cell.dtype]
    return 100 * perf.mfu(config.gbs, flops, step, cell.gpus, peak)


@pytest.mark.parametrize("cell", [c for c in CELLS if cell_key(c) not in N_A],
                         ids=lambda c: c.id)
def test_performance_cell(cell: PerfCell):
    ours, published = computed(cell), cell.value
    key = cell_key(cell)
    if key in ERRATA:
        assert (published, round(ours, 2)) == ERRATA[key]
        assert relative_miss(ours, published) > TOLERANCE, "no longer an erratum: unlist it"
    elif key in WHOLE_DAYS:
        assert (published, round(ours, 2)) == WHOLE_DAYS[key]
        assert round(ours) == published and seedtables.decimals(cell.text) == 0
        assert relative_miss(ours, published) > TOLERANCE, "now within 0.5%: unlist it"
    else:
        assert relative_miss(ours, published) <= TOLERANCE, f"{ours:.4f} vs {cell.text}"


def test_cells_counted():
    """4 tables x 3 rows of 000..003: 75 columns, 225 derived cells, 6 of them n/a."""
    assert len(CELLS) == 225
    assert {cell_key(c) for c in CELLS if c.value is None} == N_A


def test_na_cells_are_the_405b_proxies_time_to_train():
    """003 prints n/a for time to train on the 405b proxies (8/30/62 of 126 layers): a proxy
    run says nothing about training the full model on 1T tokens."""
    llama = recipe("llama3.1")
    full = llama.size("405b")["model"]["num_layers"]
    for _, size, dtype, gpus, _ in N_A:
        assert llama.resolve(size, dtype, "h100", gpus).num_layers < full


def test_older_nemotron4_tables_need_the_non_gqa_figure():
    """001/002's MFU cells reproduce with 434.5e12 / 1.01e16 (gqa=False) and miss by more than
    10% with the GQA figures (3.85e14 / 8.62e15): they were computed with the older figure."""
    for cell in CELLS:
        if cell.seed in NON_GQA_SEEDS and cell.quantity == "mfu":
            gqa = computed(cell) * recipe("nemotron").model_flops(cell.size) / non_gqa_flops(
                cell.size)
            assert relative_miss(gqa, cell.value) > 0.10


def test_405b_proxy_columns_use_the_proxy_depth():
    """003's 405b columns at 32/64/128 GPUs are proxies of 8/30/62 layers: their throughput uses
    the proxy's fixed GBS (64/64/128) and their MFU the proxy's FLOPs, not the 126-layer one."""
    for cell in CELLS:
        if cell.size == "405b" and cell.gpus <= 128 and cell.quantity == "mfu":
            full_depth = computed(cell, num_layers=126)  # overrides the resolved proxy depth
            assert relative_miss(full_depth, cell.value) > 0.5


def test_405b_mfu_errata_reproduce_with_one_query_group_per_8_heads():
    """What 003 computed: every 405b MFU cell, proxy depth included, is within 0.1% with 16 query
    groups (g/n = 1/8) in 003's formula. Llama 3.1 405b has 8 (g/n = 1/16), so we keep 8."""
    assert shape("llama3.1", "405b")["num_query_groups"] == 8
    for cell in CELLS:
        if cell_key(cell) in ERRATA:
            assert relative_miss(computed(cell, num_query_groups=16), cell.value) <= 0.001


# --- the formulas themselves --------------------------------------------------------------------

def test_derived_quantities():
    assert perf.tokens_per_second(4096, 64, 2.0) == 131072
    assert perf.days_to_train(1e12 / 86400) == 1
    assert perf.days_to_train(1e6, tokens=8.64e10) == 1
    assert perf.mfu(8, 1e15, 1.0, 8, 1000) == 1.0
    assert perf.tflops_per_gpu(8, 1e15, 2.0, 8) == 500
