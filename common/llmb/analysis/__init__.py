"""The analyzer (common/parse_train_timing.sh): logs -> step records -> one result per
run -> configurations with verdicts -> table, CSV, JSON, HTML report."""
