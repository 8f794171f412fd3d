"""Learners: losses (V-trace, TD(lambda), UPGO, entropy, KL, PPO+GAE) and the learner node reading from Reverb."""
