"""Dialects: one module each (its accumulator and its descriptor); the registry of them
all, detection and lookup by name: :mod:`.registry`."""
