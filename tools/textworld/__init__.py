"""TextWorld development tooling: rebuilding the bundled game archives."""
