"""Trace-driven simulation."""
