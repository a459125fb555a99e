"""Reading a version's Nsight Compute profile: from ncu's pages to ncu.json.

- ``ncu_parse``: ncu's CSV pages (raw, details) -> one record per profiled launch, and ``import_page`` (ncu
  prints a report's page);
- ``metrics``: ncu's metric names -> the short KEYs every other file speaks of;
- ``classify``: bottleneck class and symptom tags of one kernel, from its KEYs;
- ``kernel_names``: whose a kernel is (the version's own, or a library's), read from source and names;
- ``inventory``: every kernel a call launches (ncu's one-metric census), the kernels that get ncu's full
  sections within the run's budget, and the whole call's sums.

Nothing here imports torch, and nothing but ``import_page`` starts a process (``steps/profile.py`` and the
judge run ncu).
"""
