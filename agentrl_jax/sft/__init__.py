"""Supervised warm start: demonstrations → token streams → masked next-token likelihood."""
