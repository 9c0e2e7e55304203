"""Retrieval: keyword query building, vector search, Reciprocal Rank Fusion (pure logic)."""
