"""The installer (installer/install.sh): prompts or a YAML config -> a checked plan ->
steps that ask the disk whether they are done."""
