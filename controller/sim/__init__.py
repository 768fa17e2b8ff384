"""Seeded simulation of the metadata quorum: real pysyncobj voters on a fake clock and
a simulated network (``python -m controller.sim.cluster`` runs a longer soak)."""
