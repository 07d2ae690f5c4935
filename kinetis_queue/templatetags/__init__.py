"""Template tags of the kinetis_queue admin pages."""
