"""Velero's backups, read as statusvault's own: their layout, and the CRD shapes older servers wrote."""
