"""The recipe catalog against every published row of the seeds (tests/fixtures/seeds).

Every number here is read from the seed documents (tests/fixtures/seeds, via seedtables), never
typed twice; what is typed are the decisions: where a seed disagrees with the catalog, the
exact list of those places and why. A new disagreement fails the suite until it is decided.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import seedtables
from llmb.recipes import catalog
from llmb.recipes.catalog import CatalogError
from seedtables import ParallelismRow, PerfCell

RECIPE_OF_SEED = {"000": "nemotronh", "001": "nemotron", "002": "nemotron", "003": "llama3.1",
                  "004": "nemotron"}
SEED_ROWS = seedtables.all_parallelism_rows()
STEP_CELLS = [c for c in seedtables.all_performance_cells() if c.quantity == "step_time"]


def precedence(seed: str) -> int:
    return catalog.SOURCE_PRECEDENCE.index(seed)


def row_keys(row: ParallelismRow) -> list[tuple[str, str, str, str, int, str]]:
    """(recipe, size, dtype, gpu_type, gpus, scaling) for each dtype the row publishes."""
    return [(RECIPE_OF_SEED[row.seed], row.size, d, row.gpu_type, row.gpus, row.scaling)
            for d in row.dtypes]


PUBLISHERS: dict[tuple, set[str]] = defaultdict(set)
for _row in SEED_ROWS:
    for _key in row_keys(_row):
        PUBLISHERS[_key].add(_row.seed)


def test_precedence_is_the_specs():
    """Where seeds disagree the newest document wins: 004 > 000 > 003 > 001 > 002."""
    assert catalog.SOURCE_PRECEDENCE == ("004", "000", "003", "001", "002")


def test_every_seed_with_a_parallelism_table_is_read():
    """A reader that silently dropped a table would make every test below vacuous."""
    counts = {seed: sum(1 for r in SEED_ROWS if r.seed == seed) for seed in seedtables.SEED_IDS}
    # 000: 7 scales; 001: 8 (15b) + 4 (340b); 002: 5 scales x 2 dtypes from its headings;
    # 003: 5 (8b) + 12 (70b) + 6 (405b); 004: 6 + 2 (H100) + 3 + 3 (GB200) + 4 + 4 (B200)
    assert counts == {"000": 7, "001": 12, "002": 10, "003": 23, "004": 22}
    assert len(STEP_CELLS) == 7 + 24 + 10 + 34


# --- parallelism: every row of every table -------------------------------------------------------

# Where a seed's row disagrees with the catalog on a stated value (not DP/GA: below). Key:
# (seed, size, gpu_type, gpus, scaling, field) -> (the seed's value, the catalog's value).
# 001's 340b table prints VP=NA on every row. 004, the newest seed, prints VP=12 for the same
# TP8/PP8 layout (256, 512), 002 prints VP=12 in its titles for 128..2048, the newest seed
# sets VP 12 for 340b on H100 at every scale, and a later public revision of 001's own README
# prints 12: VP=NA is an erratum of 001. At 256/512 004 wins anyway; at 1024/2048 001 is the
# winning source of the row (GBS, reference) but its VP column is overridden.
SEED_DISAGREEMENTS = {
    ("001", "340b", "h100", gpus, "weak", "vp"): (None, 12) for gpus in (256, 512, 1024, 2048)
}

# Where a seed's DP or GA column disagrees with DP = GPUs / (TP x PP x CP) and
# GA = GBS / (MBS x DP), the arithmetic wins. Key as above -> (seed's, arithmetic).
# 004's H100 15b table prints DP=8 on every row; its own GA column (4) agrees with the
# arithmetic DP (GPUs / 2), not with 8. Its H100 340b table prints DP=4 at 512 GPUs as at 256;
# 512 / (8 x 8 x 1) = 8, and its GA=16 again agrees with 8.
SEED_DP_GA_ERRATA = {
    **{("004", "15b", "h100", gpus, "weak", "dp"): (8, gpus // 2)
       for gpus in (32, 64, 128, 256, 512)},
    ("004", "340b", "h100", 512, "weak", "dp"): (4, 8),
}

STATED_FIELDS = ("tp", "pp", "cp", "vp", "ep", "mbs", "gbs")


def resolved(row: ParallelismRow, dtype: str) -> catalog.Config:
    recipe = catalog.find_recipe(RECIPE_OF_SEED[row.seed])
    return recipe.resolve(row.size, dtype, row.gpu_type, row.gpus, row.scaling)


def seed_value(row: ParallelismRow, fld: str) -> int | None:
    return getattr(row, fld)


def stated(row: ParallelismRow, fld: str) -> bool:
    """002's titles give no CP or EP; every parallelism table gives all of STATED_FIELDS."""
    return not (row.table.endswith("(headings)") and fld in ("cp", "ep"))


@pytest.mark.parametrize("row", SEED_ROWS, ids=lambda r: r.id)
def test_seed_row_resolves_to_its_config(row: ParallelismRow):
    for dtype in row.dtypes:
        config = resolved(row, dtype)
        assert config.published
        assert (config.model_size, config.dtype, config.gpu_type, config.num_gpus,
                config.scaling) == (row.size, dtype, row.gpu_type, row.gpus, row.scaling)
        for fld in STATED_FIELDS:
            if not stated(row, fld):
                continue
            key = (row.seed, row.size, row.gpu_type, row.gpus, row.scaling, fld)
            want = SEED_DISAGREEMENTS[key][1] if key in SEED_DISAGREEMENTS else seed_value(row, fld)
            assert getattr(config, fld) == want, f"{fld} of {row.id} (line {row.line})"
        if row.layers is not None:  # 405b proxies: 8 / 30 / 62 layers
            assert config.num_layers == row.layers
        if row.seq_length is not None:
            assert config.seq_length == row.seq_length
        # DP and GA by the arithmetic, whatever the seed's column says
        assert config.dp * config.tp * config.pp * config.cp == row.gpus
        assert config.ga * config.mbs * config.dp == config.gbs
        for fld in ("dp", "ga"):
            seed_says = seed_value(row, fld)
            key = (row.seed, row.size, row.gpu_type, row.gpus, row.scaling, fld)
            if key in SEED_DP_GA_ERRATA:
                assert (seed_says, getattr(config, fld)) == SEED_DP_GA_ERRATA[key]
            elif seed_says is not None:
                assert getattr(config, fld) == seed_says, f"{fld} of {row.id} (line {row.line})"


@pytest.mark.parametrize("row", SEED_ROWS, ids=lambda r: r.id)
def test_seed_row_source_is_the_newest_seed_publishing_it(row: ParallelismRow):
    for key, dtype in zip(row_keys(row), row.dtypes, strict=True):
        assert resolved(row, dtype).source == min(PUBLISHERS[key], key=precedence)


def test_seed_values_disagree_with_the_catalog_only_where_pinned():
    found = {}
    for row in SEED_ROWS:
        for dtype in row.dtypes:
            config = resolved(row, dtype)
            for fld in STATED_FIELDS:
                if stated(row, fld) and getattr(config, fld) != seed_value(row, fld):
                    found[(row.seed, row.size, row.gpu_type, row.gpus, row.scaling, fld)] = (
                        seed_value(row, fld), getattr(config, fld))
    assert found == SEED_DISAGREEMENTS


def test_seed_dp_ga_columns_disagree_with_the_arithmetic_only_where_pinned():
    found = {}
    for row in SEED_ROWS:
        dp = row.gpus // (row.tp * row.pp * (row.cp or 1))
        ga = row.gbs // (row.mbs * dp)
        for fld, arithmetic in (("dp", dp), ("ga", ga)):
            if seed_value(row, fld) not in (None, arithmetic):
                found[(row.seed, row.size, row.gpu_type, row.gpus, row.scaling, fld)] = (
                    seed_value(row, fld), arithmetic)
    assert found == SEED_DP_GA_ERRATA


def test_dp_errata_are_contradicted_by_the_seeds_own_ga_column():
    """Why the arithmetic wins: the printed GA only works out with the arithmetic DP."""
    for (seed, size, gpu, gpus, scaling, _), (printed_dp, dp) in SEED_DP_GA_ERRATA.items():
        (row,) = [r for r in SEED_ROWS if (r.seed, r.size, r.gpu_type, r.gpus, r.scaling)
                  == (seed, size, gpu, gpus, scaling)]
        assert row.ga == row.gbs // (row.mbs * dp)
        assert row.ga != row.gbs // (row.mbs * printed_dp)


def test_seeds_agree_with_each_other_where_they_overlap():
    """004 and 001 (15b at 16..512, 340b at 256/512) and 002 (340b at 256..2048) state the same
    layout and GBS wherever they overlap; only 001's VP column differs (SEED_DISAGREEMENTS)."""
    by_key: dict[tuple, dict[str, ParallelismRow]] = defaultdict(dict)
    for row in SEED_ROWS:
        for key in row_keys(row):
            by_key[key][row.seed] = row
    overlaps = {k: v for k, v in by_key.items() if len(v) > 1}
    assert {tuple(sorted(v)) for v in overlaps.values()} == {
        ("001", "004"), ("001", "002", "004"), ("001", "002")}
    for rows in overlaps.values():
        for fld in ("tp", "pp", "mbs", "gbs"):
            assert len({getattr(r, fld) for r in rows.values()}) == 1


def test_002_gbs_is_two_per_node_and_ga_16_as_its_text_says():
    """002 has no parallelism table: GBS is in its column headings (`(GBS=32)`), the text says
    GBS = nodes x 2 and its titles say GA=16; the catalog agrees at every scale."""
    rows = [r for r in SEED_ROWS if r.seed == "002"]
    assert sorted({r.gpus for r in rows}) == [128, 256, 512, 1024, 2048]
    for row in rows:
        config = resolved(row, row.dtypes[0])
        assert row.gbs == config.nodes * 2 == config.gbs
        assert config.ga == row.ga == 16
        assert "<number of nodes> * 2" in seedtables.seed_text("002")


def nemo_recipes() -> list[catalog.Recipe]:
    """The recipes the seeds publish (the Megatron-Bridge ones, bridge/*, come from
    NVIDIA/exemplar-performance: tests/recipes/test_bridge_catalog.py)."""
    return [r for r in catalog.all_recipes() if not r.is_bridge]


def test_catalog_publishes_exactly_the_seeds_rows():
    """No invented rows, none missing: the metadata's published matrix is the seeds' one."""
    ours = {(r.recipe, r.model_size, r.dtype, r.gpu_type, r.num_gpus, r.scaling)
            for recipe in nemo_recipes() for r in recipe.rows()}
    assert ours == set(PUBLISHERS)


def test_every_metadata_row_comes_from_the_seed_it_names():
    for recipe in nemo_recipes():
        for config in recipe.rows():
            key = (config.recipe, config.model_size, config.dtype, config.gpu_type,
                   config.num_gpus, config.scaling)
            assert config.source in PUBLISHERS[key], config.experiment_name


# --- references: every step-time cell of every Expected Performance table -----------------------

def cell_key(cell: PerfCell) -> tuple[str, str, str, str, int]:
    return RECIPE_OF_SEED[cell.seed], cell.size, cell.dtype, cell.gpu_type, cell.gpus


REF_PUBLISHERS: dict[tuple, dict[str, float]] = defaultdict(dict)
for _cell in STEP_CELLS:
    REF_PUBLISHERS[cell_key(_cell)][_cell.seed] = float(_cell.text)


@pytest.mark.parametrize("cell", STEP_CELLS, ids=lambda c: c.id)
def test_reference_is_the_newest_seeds_step_time(cell: PerfCell):
    recipe = catalog.find_recipe(RECIPE_OF_SEED[cell.seed])
    ref = recipe.reference(cell.size, cell.dtype, cell.gpu_type, cell.gpus, "weak")
    publishers = REF_PUBLISHERS[cell_key(cell)]
    winner = min(publishers, key=precedence)
    assert (ref.step_time, ref.source) == (publishers[winner], winner)
    if cell.seed == winner:
        assert ref.step_time == cell.value


def test_metadata_references_are_exactly_the_seeds_step_times():
    """Every published step time is kept with its source, the losing 002 ones included; none
    is invented."""
    ours = {}
    for recipe in nemo_recipes():
        for ref in recipe.data["references"]:
            for gpus, step in ref["step_time"].items():
                ours[(recipe.name, ref["size"], ref["dtype"], ref["gpu_type"], gpus,
                      ref["scaling"], ref["source"])] = step
    seeds = {(*cell_key(c), "weak", c.seed): c.value for c in STEP_CELLS}
    assert ours == seeds


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_001_beats_002_for_nemotron_340b_on_h100(dtype: str):
    """The one overlap of step-time tables: 001 and 002 both publish 340b at 256..2048 and they
    differ (002 is NeMo 24.11, slower); 001 is newer and wins. 128 GPUs is 002's alone."""
    recipe = catalog.find_recipe("nemotron")
    for gpus in (256, 512, 1024, 2048):
        ref = recipe.reference("340b", dtype, "h100", gpus)
        older = REF_PUBLISHERS[("nemotron", "340b", dtype, "h100", gpus)]["002"]
        assert ref.source == "001"
        assert ref.step_time < older
    assert recipe.reference("340b", dtype, "h100", 128).source == "002"


def test_004_publishes_no_step_times_so_gb200_b200_and_strong_have_no_reference():
    assert not [t for t in seedtables.tables("004") if seedtables.is_performance_table(t)]
    recipe = catalog.find_recipe("nemotron")
    for config in recipe.rows(model_size="340b"):
        if config.gpu_type != "h100":
            assert recipe.reference("340b", config.dtype, config.gpu_type, config.num_gpus,
                                    config.scaling) is None


def test_every_reference_names_the_stack_that_measured_it():
    """Provenance: each reference carries its seed's image, NeMo and upstream release, and
    says so in one short phrase (the analyzer's reference_source)."""
    for recipe in nemo_recipes():
        for config in recipe.rows():
            ref = recipe.reference(config.model_size, config.dtype, config.gpu_type,
                                   config.num_gpus, config.scaling)
            if ref is None:
                continue
            assert ref.image.startswith("nvcr.io/nvidia/nemo:") and ref.nemo and ref.upstream
            tag = ref.image.rpartition(":")[2]
            assert ref.describe() == f"seed {ref.source}, nemo {tag}"
    assert catalog.Reference(1.0, "003").describe() == "seed 003"


def test_a_seed_that_names_its_image_agrees_with_its_source():
    """000 and 002 name the container they measured in; 001 and 003 do not (their release's
    setup.sh does: the README's Fidelity section cites it)."""
    named = 0
    for recipe in nemo_recipes():
        for seed, stack in recipe.data["sources"].items():
            text = seedtables.seed_text(seed)
            tag = stack["image"].rpartition(":")[2]
            mentioned = {m for m in ("24.09", "25.02.01", "25.04.01") if f"nemo:{m}" in text}
            if mentioned:
                named += 1
                assert mentioned == {tag}, (recipe.name, seed, mentioned)
    assert named == 2


def test_reference_for_an_unpublished_scale_is_none():
    assert catalog.find_recipe("llama3.1").reference("8b", "fp8", "h100", 256) is None


# --- identity ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "workload", "seq_length"), [
    ("llama3.1", "pretrain_llama3.1", 8192),
    ("nemotron", "pretrain_nemotron4", 4096),
    ("nemotronh", "pretrain_nemotronh", 8192),
])
def test_recipe_identity(recipes, name: str, workload: str, seq_length: int):
    recipe = recipes[name]
    assert recipe.workload == workload
    assert catalog.find_recipe(workload) is recipe
    assert recipe.seq_length == seq_length
    assert recipe.image == "nvcr.io/nvidia/nemo:25.04.01"
    assert recipe.data["framework"]["version"] == "25.04.01"
    assert recipe.defaults["model_size"] == recipe.sizes[0]


def test_the_container_is_the_one_000_imports():
    """000 is the only seed that spells out its image (its manual `enroot import`)."""
    text = seedtables.seed_text("000")
    assert "nvidia+nemo+25.04.01.sqsh docker://nvcr.io#nvidia/nemo:25.04.01" in text


# --- resolve: what is not supported, and what is extended ---------------------------------------

@pytest.mark.parametrize(("name", "args", "field", "value", "allowed"), [
    pytest.param("nemotronh", ("56b", "bf16", "h100", 256), "dtype", "bf16", ("fp8",),
                 id="nemotronh-bf16"),
    pytest.param("llama3.1", ("8b", "fp8", "gb200", 128), "gpu_type", "gb200", ("h100",),
                 id="llama-on-gb200"),
    pytest.param("nemotron", ("15b", "fp8", "gb200", 128), "gpu_type", "gb200", ("h100",),
                 id="15b-on-gb200"),
    pytest.param("nemotron", ("15b", "fp8", "h100", 128, "strong"), "scaling", "strong",
                 ("weak",), id="15b-strong"),
    pytest.param("nemotron", ("340b", "bf16", "h100", 256, "strong"), "scaling", "strong",
                 ("weak",), id="340b-h100-strong"),
    pytest.param("nemotron", ("15b", "fp8", "h100", 48), "num_gpus", 48,
                 (16, 32, 64, 128, 256, 512, 1024, 2048), id="between-published-scales"),
    pytest.param("nemotron", ("340b", "fp8", "b200", 2048, "strong"), "num_gpus", 2048,
                 (128, 256, 512, 1024), id="above-largest"),
    pytest.param("llama3.1", ("405b", "bf16", "h100", 256), "num_gpus", 256,
                 (32, 64, 128, 512, 1024, 2048), id="405b-gap"),
    pytest.param("llama3.1", ("8b", "fp8", "h100", 12), "num_gpus", 12,
                 (8, 16, 32, 64, 128), id="not-a-multiple-of-8"),
    pytest.param("nemotron", ("340b", "fp8", "gb200", 130), "num_gpus", 130,
                 (128, 256, 512), id="not-a-multiple-of-4"),
    pytest.param("llama3.1", ("8b", "fp8", "h100", 0), "num_gpus", 0,
                 (8, 16, 32, 64, 128), id="zero-gpus"),
    pytest.param("llama3.1", ("8b", "fp16", "h100", 8), "dtype", "fp16", ("bf16", "fp8"),
                 id="unknown-dtype"),
    pytest.param("llama3.1", ("13b", "fp8", "h100", 8), "model_size", "13b",
                 ("8b", "70b", "405b"), id="unknown-size"),
    pytest.param("nemotron", ("15b", "fp8", "a100", 16), "gpu_type", "a100",
                 ("h100", "b200", "gb200", "h200", "b300", "gb300"), id="unknown-gpu"),
    pytest.param("nemotron", ("15b", "fp8", "h100", 16, "sideways"), "scaling", "sideways",
                 ("weak", "strong"), id="unknown-scaling"),
])
def test_unsupported_requests_name_field_value_and_allowed(recipes, name, args, field, value,
                                                            allowed):
    with pytest.raises(CatalogError) as err:
        recipes[name].resolve(*args)
    assert (err.value.field, err.value.value, err.value.allowed) == (field, value, allowed)
    message = str(err.value)
    assert str(value) in message and "\n" not in message
    assert all(str(a) in message for a in allowed) or field == "num_gpus"


def test_gpus_per_node_overrides_and_is_checked(recipes):
    llama = recipes["llama3.1"]
    assert llama.resolve("8b", "fp8", "h100", 8, gpus_per_node=4).nodes == 2
    with pytest.raises(CatalogError) as err:
        llama.resolve("8b", "fp8", "h100", 16, gpus_per_node=0)
    assert (err.value.field, err.value.value) == ("gpus_per_node", 0)
    with pytest.raises(CatalogError) as err:
        llama.resolve("8b", "fp8", "h100", 16, gpus_per_node=3)
    assert err.value.field == "num_gpus" and "3 GPUs per node" in str(err.value)
    assert recipes["nemotron"].resolve("340b", "fp8", "gb200", 128).nodes == 32


@pytest.mark.parametrize(("name", "args", "expect"), [
    # above the largest published scale: the largest row's layout, weak-scaled GBS
    pytest.param("nemotron", ("15b", "fp8", "h100", 4096),
                 dict(tp=2, pp=1, cp=1, mbs=2, gbs=16384, dp=2048, ga=4, source="001"),
                 id="15b-4096"),
    # below the smallest (a smoke test on 2 nodes)
    pytest.param("nemotronh", ("56b", "fp8", "h100", 16),
                 dict(tp=8, pp=1, mbs=1, gbs=48, dp=2, ga=24, num_layers=118, source="000"),
                 id="56b-16"),
    # between published scales
    pytest.param("llama3.1", ("8b", "bf16", "h100", 24),
                 dict(tp=1, pp=1, cp=2, gbs=384, dp=12, ga=32), id="8b-24"),
    # strong scaling keeps its fixed GBS
    pytest.param("nemotron", ("340b", "fp8", "b200", 2048, "strong"),
                 dict(tp=8, pp=4, gbs=512, dp=64, ga=8), id="340b-b200-strong-2048"),
])
def test_allow_unpublished_extends_the_nearest_row(recipes, name, args, expect):
    config = recipes[name].resolve(*args, allow_unpublished=True)
    assert config.published is False
    assert {k: getattr(config, k) for k in expect} == expect


def test_allow_unpublished_keeps_published_rows_published_and_checks_arithmetic(recipes):
    nemotron = recipes["nemotron"]
    assert nemotron.resolve("15b", "fp8", "h100", 16, allow_unpublished=True).published
    with pytest.raises(CatalogError, match=r"not divisible by TP x PP x CP = 64") as err:
        nemotron.resolve("340b", "fp8", "h100", 32, allow_unpublished=True)
    assert err.value.field == "num_gpus"
    with pytest.raises(CatalogError) as err:  # still a whole number of nodes
        nemotron.resolve("15b", "fp8", "h100", 12, allow_unpublished=True)
    assert err.value.field == "num_gpus"
    with pytest.raises(CatalogError) as err:  # and still a supported combination
        recipes["nemotronh"].resolve("56b", "bf16", "h100", 4096, allow_unpublished=True)
    assert err.value.field == "dtype"


# --- experiment names ---------------------------------------------------------------------------

def test_experiment_name_of_004s_example():
    """004's parse_train_timing example: 340b fp8 on 128 GB200, strong scaling (GBS 512)."""
    config = catalog.find_recipe("nemotron").resolve("340b", "fp8", "gb200", 128, "strong")
    name = "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp4_cp1_vp12_mbs1_gbs512"
    assert config.experiment_name == name
    assert f"{name}_389757 " in seedtables.seed_text("004")


def test_experiment_name_of_000s_example_follows_the_table_not_its_typo():
    """000's example output names a 128-GPU run `..._gbs768`, but 000's own table gives GBS 384
    at 128 GPUs (768 is the 256-GPU GBS), and the example's TFLOPS_per_GPU (532.39) only works
    out with GBS 384 (test_perf). The table wins: the name says gbs384."""
    config = catalog.find_recipe("nemotronh").resolve("56b", "fp8", "h100", 128)
    stem = "pretrain_nemotronh_56b_fp8_gpus128_tp8_pp1_cp1_vpNone_mbs1"
    assert config.experiment_name == f"{stem}_gbs384"
    assert f"{stem}_gbs768 " in seedtables.seed_text("000")


@pytest.mark.parametrize(("name", "args", "expected"), [
    ("llama3.1", ("8b", "fp8", "h100", 8),
     "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"),
    ("llama3.1", ("405b", "bf16", "h100", 64),
     "pretrain_llama3.1_405b_bf16_gpus64_tp8_pp4_cp2_vp8_mbs1_gbs64"),
    ("nemotron", ("15b", "bf16", "h100", 64),
     "pretrain_nemotron4_15b_bf16_gpus64_tp2_pp1_cp1_vpNone_mbs2_gbs256"),
])
def test_experiment_names(recipes, name, args, expected):
    assert recipes[name].resolve(*args).experiment_name == expected



# --- a GPU type a recipe has no row for ---------------------------------------------------------

@pytest.mark.parametrize(("recipe", "gpu", "has"), [
    ("llama3.1", "b300", "h100"), ("nemotronh", "gb200", "h100"),
    ("nemotron", "h200", "h100, gb200, b200"),
])
def test_a_gpu_type_without_a_published_row_is_refused_naming_what_knows_it(recipe, gpu, has):
    with pytest.raises(CatalogError) as err:
        catalog.require_gpu_type(catalog.find_recipe(recipe), gpu)
    assert str(err.value) == (
        f"{gpu} is not supported by {recipe}; allowed: {has} (the GPU types it publishes rows "
        "for); the analyzer (--gpu-type) and llmb-run screen also support h200")
    assert (err.value.field, err.value.value) == ("gpu_type", gpu)


def test_a_published_or_unknown_gpu_type_is_left_alone():
    for recipe in catalog.all_recipes():
        for gpu in [*recipe.gpu_types, "a100", ""]:
            assert catalog.require_gpu_type(recipe, gpu) is None
