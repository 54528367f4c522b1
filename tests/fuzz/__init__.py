"""Mutation fuzzing of lattice's readers and bundle loader (see harness.py)."""
