"""llmb.launch.placement: node lists, reservation, QOS, segment and extra sbatch options, from
llmb-run's flags and launch.sh's LLMB_* variables; every refusal is one line naming the flag or
variable; the environment sbatch runs in carries no SBATCH_* input variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.launch import placement, request
from llmb.launch.placement import Placement, PlacementError
from llmb.recipes import catalog


def test_hostlist_expansion():
    assert placement.expand_hostlist("--nodelist", "node[1-3],gpu07") == \
        ["node1", "node2", "node3", "gpu07"]
    assert placement.expand_hostlist("--x", "dgx[008-010,012]") == \
        ["dgx008", "dgx009", "dgx010", "dgx012"]
    assert placement.expand_hostlist("--x", "r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]


BAD_VALUES = [  # (field, value, words the one-line message must hold)
    ("nodelist", "node1\nnode2", ["--nodelist=node1\\nnode2", "control character"]),
    ("nodelist", "node[1-3", ["--nodelist=node[1-3", "unbalanced brackets"]),
    ("nodelist", "node[3-1]", ["runs backwards"]),
    ("nodelist", "node[1-99999999]", ["names 99999999 nodes; at most 65536"]),
    ("nodelist", "n[0-999]x[0-999]", ["names 1000000 nodes; at most 65536"]),
    ("nodelist", "/etc/hosts", ["looks like a file"]),
    ("nodelist", "node1,,node2", ["empty name"]),
    ("nodelist", "node$(touch x)", ["not part of a node name"]),
    ("exclude", "node1 node2", ["--exclude=node1 node2", "not part of a node name"]),
    ("exclude", "-node1", ["is not a node name"]),
    ("reservation", "acc;rm -rf", ["--reservation=acc;rm -rf", "not a reservation name"]),
    ("reservation", "res'x", ["contains '", "#SBATCH"]),
    ("qos", "hi\\gh", ["--qos=hi\\gh", "contains \\"]),
    ("qos", "", ["--qos is empty"]),
    ("qos", "x" * 2000, ["2000 characters"]),
    ("qos", "héllo", ["not ASCII"]),
    ("segment", "0", ["--segment=0", "positive whole number"]),
    ("segment", "-2", ["--segment=-2"]),
    ("segment", "١٢", ["--segment=١٢"]),  # not ASCII digits
    ("segment", "99999999999", ["--segment=99999999999"]),
    ("segment", "01", ["--segment=01", "positive whole number", "write it as 1"]),
    ("segment", "+4", ["--segment=+4", "write it as 4"]),
    ("segment", "0004", ["write it as 4"]),
]


@pytest.mark.parametrize(("name", "value", "words"), BAD_VALUES,
                         ids=[f"{n}-{v[:12]!r}" for n, v, _ in BAD_VALUES])
def test_bad_values_are_one_line_naming_the_flag(name, value, words):
    with pytest.raises(PlacementError) as err:
        placement.build(**{name: value})
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


BAD_ARGS = [
    ("--time=01:00:00", "llmb sets --time itself; use TIME_LIMIT"),
    ("--partition=x", "llmb sets --partition itself"),
    ("--nodelist=node1", "llmb sets --nodelist itself; use --nodelist"),
    ("--export=NONE", "llmb sets --export itself"),
    ("--frobnicate=1", "--frobnicate is not an sbatch option llmb passes on"),
    ("-C h100", "is not --KEY=VALUE"),
    ("--constraint", "--constraint needs a value"),
    ("--reboot=yes", "--reboot takes no value"),
    ("--comment=a\tb", "control character"),
    ("--comment=a\\b", "contains \\"),
]


@pytest.mark.parametrize(("arg", "words"), BAD_ARGS, ids=[a for a, _ in BAD_ARGS])
def test_bad_slurm_args(arg, words):
    with pytest.raises(PlacementError) as err:
        placement.build(slurm_args=[arg])
    assert words in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("--slurm-arg=")


def test_contradictions_are_refused():
    with pytest.raises(PlacementError, match="both name node2; a node cannot be required"):
        placement.build(nodelist="node[1-2]", exclude="node2")
    with pytest.raises(PlacementError, match="gives --constraint more than once"):
        placement.build(slurm_args=["--constraint=a", "--constraint=b"])
    place = placement.build(segment="3", nodelist="n[1-5]")
    with pytest.raises(PlacementError, match="--segment=3 does not divide the job's 4 node"):
        placement.check_segment(place, 4)
    with pytest.raises(PlacementError, match="names 5 nodes but the job runs on 4"):
        placement.check_nodelist_size(place, 4)


def test_record_env_and_sbatch_options_round_trip():
    place = placement.build(nodelist="node[1-2]", exclude="node9", reservation="acc",
                            qos="high", segment="2",
                            slurm_args=["--comment=my run #3", "--reboot"])
    assert place.record() == {"nodelist": "node[1-2]", "exclude": "node9",
                              "reservation": "acc", "qos": "high", "segment": 2,
                              "slurm_args": ["--comment=my run #3", "--reboot"]}
    env = place.to_env()
    assert env["LLMB_SLURM_ARGS"] == "'--comment=my run #3' --reboot"
    assert placement.from_env(env) == place
    assert place.sbatch_options() == {"nodelist": "node[1-2]", "exclude": "node9",
                                      "reservation": "acc", "qos": "high",
                                      "comment": "my run #3", "reboot": True}
    assert not Placement() and Placement().record() == {} and Placement().to_env() == {}
    merged = place.merged(placement.build(exclude="node8", qos="low"))
    assert (merged.exclude, merged.qos, merged.nodelist) == ("node8", "low", "node[1-2]")


def test_env_messages_name_the_variable():
    with pytest.raises(PlacementError, match=r"^LLMB_EXCLUDE=n\[1 is not a Slurm node list"):
        placement.from_env({"LLMB_EXCLUDE": "n[1"})
    with pytest.raises(PlacementError, match=r"^LLMB_SLURM_ARGS=.*cannot be split"):
        placement.from_env({"LLMB_SLURM_ARGS": "--comment=unclosed 'quote"})
    with pytest.raises(PlacementError, match=r"^LLMB_SLURM_ARGS=--gres=gpu:4: llmb sets --gres"):
        placement.from_env({"LLMB_SLURM_ARGS": "--gres=gpu:4"})
    assert placement.from_env({"LLMB_QOS": "  ", "LLMB_NODELIST": ""}) == Placement()


def test_for_launch_refuses_sbatch_input_variables_and_non_slurm_use():
    with pytest.raises(PlacementError, match=r"^SBATCH_TIMELIMIT=1:00 is set; sbatch would "
                       r"apply it over the job script's #SBATCH lines.*use TIME_LIMIT"):
        placement.for_launch({"SBATCH_TIMELIMIT": "1:00"}, "slurm", 2)
    with pytest.raises(PlacementError, match=r"^SBATCH_QOS=high .*LLMB_QOS"):
        placement.for_launch({"SBATCH_QOS": "high"}, "slurm", 2)
    with pytest.raises(PlacementError, match=r"^LLMB_NODELIST=n1 applies to CLUSTER_TYPE=slurm"):
        placement.for_launch({"LLMB_NODELIST": "n1"}, "local", 1)
    # the ones llmb reads itself are fine
    assert not placement.for_launch({"SBATCH_ACCOUNT": "a", "SBATCH_GPUS_PER_NODE": "8"},
                                    "slurm", 2)


def test_sbatch_environment_is_clean_while_submitting_and_restored():
    environ = {"SBATCH_ACCOUNT": "a", "SBATCH_GPUS_PER_NODE": "8", "SBATCH_EXCLUSIVE": "1",
               "HF_TOKEN": "keep", "PATH": "/bin"}
    with placement.sbatch_environment(environ):
        assert environ == {"HF_TOKEN": "keep", "PATH": "/bin"}
    assert environ["SBATCH_GPUS_PER_NODE"] == "8" and len(environ) == 5


def test_request_carries_the_placement():
    env = {"LLMB_INSTALL": "/x", "SBATCH_ACCOUNT": "a", "SBATCH_PARTITION": "p",
           "JOB_TOTAL_GPUS": "16", "DRY_RUN": "true", "LLMB_EXCLUDE": "node[3-4]",
           "LLMB_SEGMENT": "2"}
    req = request.from_env(catalog.find_recipe("nemotron"), env)
    assert req.placement.exclude == "node[3-4]" and req.placement.segment == 2
    with pytest.raises(request.RequestError, match=r"^LLMB_SEGMENT=3 does not divide the "
                       r"job's 2 node"):
        request.from_env(catalog.find_recipe("nemotron"), {**env, "LLMB_SEGMENT": "3"})


def test_every_placement_variable_and_flag_is_documented():
    """docs/llmb-run.md's placement table names every flag and variable; each recipe
    README's Variables list names every variable (where launch.sh users look)."""
    repo = Path(__file__).resolve().parents[2]
    table = (repo / "docs" / "llmb-run.md").read_text().split("## Node placement")[1]
    for var, (flag, _) in placement.ENV_VARS.items():
        assert f"`{var}" in table and f"`{flag}" in table, var
    for recipe in ("llama3.1", "nemotron", "nemotronh"):
        text = (repo / recipe / "README.md").read_text()
        for var in placement.ENV_VARS:
            assert f"`{var}" in text, (recipe, var)


def test_sbatch_argv_and_the_default_segment():
    place = placement.build(exclude="n7", qos="q", slurm_args=["--contiguous", "--comment=x"])
    assert place.sbatch_argv() == ["--exclude=n7", "--qos=q", "--contiguous", "--comment=x"]
    assert place.sbatch_argv(18) == [*place.sbatch_argv(), "--segment=18"]
    assert placement.build(segment=9).sbatch_argv(18) == ["--segment=9"]  # given wins


def test_with_excluded_adds_only_new_nodes_and_refuses_a_required_one():
    place = placement.build(exclude="node[1-2]", qos="q")
    wider, new = place.with_excluded(["node2", "node5", "node5"])
    assert (wider.exclude, new, wider.qos) == ("node[1-2,5]", ("node5",), "q")
    assert place.with_excluded(["node1"]) == (place, ())
    with pytest.raises(placement.PlacementError, match=r"^--exclude-suspect: node node4 is to "
                       r"be left out but --nodelist=node\[3-4\] requires it"):
        placement.build(nodelist="node[3-4]").with_excluded(["node4"])
