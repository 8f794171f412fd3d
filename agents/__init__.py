"""Agents: networks, their pure initial_state/step/unroll functions, versioned parameters and their (de)serialisation."""
