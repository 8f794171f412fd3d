"""Entry points (python -m experiments.league, matrix_league, nashconv, dashboard), configs, the program graph and its launchers."""
