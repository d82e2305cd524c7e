"""Learner connector pieces: the token batch, the advantages and the frozen log-probs."""
