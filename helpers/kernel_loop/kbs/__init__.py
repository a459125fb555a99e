"""The knowledge base (KBS) as a support package: markdown pages searched by measured symptoms.

- ``schema``: the page schema (required and optional front-matter keys) and the vocabularies
  its list keys take (``kernel-loop kbs schema`` prints it);
- ``corpus``: where pages come from, how a file splits into pages, and the ``kbs check`` rules;
- ``index``: the SQLite FTS5 index of the corpus, kept in the user cache;
- ``family``: the kernel families, the words that name them and which pages belong to one;
- ``search``: ranking (text, symptoms, filters and the kernel family), ``get(page_id)``, corpus
  counts, the query log and the command that re-runs a query;
- ``evidence``: the two required queries and the ``vK/kbs_evidence.md`` draft.

The ``kbs`` loop step (``steps/kbs.py``) is only the command line over these modules; other
steps (the report) use them directly.
"""
