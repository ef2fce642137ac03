"""vision package."""
