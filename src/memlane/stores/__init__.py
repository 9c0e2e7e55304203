"""Storage backends behind the protocols in :mod:`memlane.stores.base`."""
