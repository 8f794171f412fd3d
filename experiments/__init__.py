"""Entry points (python -m experiments.league, matrix_league, nashconv, dashboard), configs and runners."""
