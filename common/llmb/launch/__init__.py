"""The login-node half of a run: launch variables -> validated request -> run manifest ->
nemo-run executor (Slurm, Run:ai or local) -> submission or DRY_RUN."""


def __getattr__(name: str) -> object:
    """`llmb.launch.LlmbExperiment`: the import path nemo-run records in every run directory
    (llmb.launch.experiment builds the class on first use, so importing this package never
    imports nemo-run)."""
    if name == "LlmbExperiment":
        from llmb.launch import experiment

        return experiment.LlmbExperiment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
