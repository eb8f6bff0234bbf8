"""Trace-driven simulation: importers for recorded workloads and fleets."""
