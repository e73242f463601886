"""Adversarial suite: hostile snippets, each with its expected status and leak checks around every run."""
