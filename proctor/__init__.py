"""Proctor: RL environments for AI agents that the agents cannot cheat."""
