"""What every part of the restore shares, below them all: the plan, the journal, the pause markers, the write marks
(settle.py), the served types and the managedFields helpers (fields.py)."""
