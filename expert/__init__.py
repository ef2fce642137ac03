"""expert package."""
