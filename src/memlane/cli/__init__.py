"""The ``memlane`` command line: thin commands over the :class:`memlane.Memory` facade."""
