"""The prompts of dialogue-judge's fact-level rubrics, as the simulator's default rules recognise them: a rule whose
``match`` is one of these answers in that rubric's protocol (``facts``)."""

FACT_PROTOCOL = r"(?m)^\[fact:[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}\] \("
"""The default rule's ``match``: the prompt lists facts in the protocol's format."""

MEMORY_PROTOCOL = r"Generated memory to audit"
"""The default rule's ``match``: the prompt audits a generated memory against gold facts."""

EXTRACT_PROTOCOL = r"Sources to split into atomic facts"
"""The default rule's ``match``: the prompt asks for the atomic facts of the listed sources."""
