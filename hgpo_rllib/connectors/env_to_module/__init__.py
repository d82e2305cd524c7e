"""Env-to-module connector pieces: the prompt of each step."""
