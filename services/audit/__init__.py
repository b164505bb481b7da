"""Audit: one aggregate's events and state at any version or time, timelines, digests, export and import."""
