"""Pure league logic: players and roles, payoff matrix, PFSP and matchmaking, snapshot and reset rules, meta-game (Nash) and ratings. No JAX, no I/O."""
