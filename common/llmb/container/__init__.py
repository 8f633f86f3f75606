"""What runs inside the benchmark image (NeMo 2.3.1, nemo-run 0.4.0): the run manifest ->
a train plan -> the NeMo 2 recipe, or the smoke workload; NeMo's log lines."""
