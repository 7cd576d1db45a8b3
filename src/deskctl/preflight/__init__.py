"""Preflight: checks that run before anything is paid for."""
