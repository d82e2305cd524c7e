"""HGPO's torch learner."""
