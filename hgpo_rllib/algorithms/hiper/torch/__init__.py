"""HiPER's torch learner."""
