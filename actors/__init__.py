"""Actors: games, reward plug-ins, the batched-inference actor node and the evaluator node."""
