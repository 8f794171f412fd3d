"""Games: one two-sided zero-sum batch protocol over SMAX races, OpenSpiel poker and matrix games."""
