"""dagger package."""
