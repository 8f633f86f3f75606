"""Leaf helpers every part uses: strict values, shell safety, files, secrets, progress,
questions to Slurm and the error base class. They import nothing else of llmb."""
