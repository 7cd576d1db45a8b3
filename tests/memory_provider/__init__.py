"""A package, so that this folder's modules (its conftest too) import under its name: no two folders' modules
share one, and a helper here imports as ``<folder>._helper`` (tests/ is on pytest's pythonpath)."""
