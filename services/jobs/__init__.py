"""Artifact generation jobs: request, the workers' three phases, their queries."""
