"""Foundations every layer uses: atomic file writes and line readers, setting checks, device probes."""
