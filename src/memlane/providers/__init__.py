"""Model providers: embedders (``embed/``) and, later, LLMs (``llm/``)."""
