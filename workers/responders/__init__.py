"""Systems under test: the responders that generate the responses a run judges (docs/generation.md).

``callers`` (chat model + strategy, http, python), ``pipeline`` (a strategy's declared steps for one item),
``parsers`` (how a step's reply becomes state), ``generate`` (many items x systems, concurrently, resumable).
"""
