"""Subscription cursors: which offsets of a partition a subscription has acknowledged."""
