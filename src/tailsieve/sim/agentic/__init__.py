"""The agentic simulator: multi-turn sessions with tools on ``ReplicaEngine`` replicas with
prefix caches, under every session router of ``tailsieve.session``."""
