"""Planning: every object decided before the first write (or as the archive streams by)."""
