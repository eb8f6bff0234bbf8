"""Executors: what runs placed tasks (simulated first; local processes and Ray later)."""
