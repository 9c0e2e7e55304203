"""Privacy parts that do no I/O: PII redaction before storage (:mod:`memlane.privacy.redaction`)."""
