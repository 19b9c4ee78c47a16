"""The instance as a whole: administration (admin) and the public figures (public)."""
