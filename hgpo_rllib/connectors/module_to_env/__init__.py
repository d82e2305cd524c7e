"""Module-to-env connector pieces: the generated text goes to the env."""
