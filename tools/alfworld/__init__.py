"""ALFWorld development tooling: game generation, the differential runner and fuzzing."""
