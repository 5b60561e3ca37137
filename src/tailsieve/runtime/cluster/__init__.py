"""Replicas on a Ray cluster (``tailsieve launch --ray``); Ray is imported lazily."""
