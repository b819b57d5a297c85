"""Value types: schedules, the symbolic plan's records (Layout, StepSpec, HomeSpec, CommStep), bound evaluation."""
