"""Pending acks: acknowledgements made inside transactions that have not ended yet."""
