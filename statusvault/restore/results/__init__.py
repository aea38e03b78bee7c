"""Results: each object's outcome, the report, the run's verdict, and the look again once it settles."""
