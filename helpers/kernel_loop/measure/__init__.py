"""Measuring a kernel across a trust boundary.

Every piece of user code runs in a child process.  Two kinds of process take part:

- the **judge** (``judge``; trusted: it imports ref.py, never the kernel file) draws the inputs and the
  model parameters from the run's seed, allocates every output buffer, computes the reference, decides
  which calls are verified and verifies them in its own buffers;
- the **worker** (``worker``; untrusted: it imports the kernel) maps the judge's buffers, calls the
  kernel when told and says "done".  It decides nothing: it cannot tell a correctness call from a timed
  or a profiled one, and it never learns which calls are verified.

``sandbox`` is the worker's file sandbox (Landlock), put in place before the kernel is imported: no
record key, nothing of the run directory but the files it was given, no tracing of the judge.
``protocol`` is what passes between them (JSON messages over a Unix socket, tensors by CUDA IPC or
shared files); ``problem`` builds the judge's data from ref.py; ``conditions`` are the conditions of a
user's call that correctness varies (output pre-states, the module's mode, input ranges), ``modes`` what Model
gives in a module's mode (training, eval, its gradients); ``calls`` makes
the calls on one worker and checks them; ``held``, the results a caller holds (kept, let go, kept by the kernel); ``under_ncu`` runs a worker under ncu (and reads ncu's census of a
call of many kernels to choose what gets full sections); ``session`` is the CLI's side: it starts
the judge, waits for it with the run's timeout and ends every process the step started.

Imports: ``worker`` imports ``protocol``, ``sandbox`` and the loader/build/timing support modules, never ``judge``,
``problem`` or ``compare``; ``judge`` imports ``protocol`` and ``problem``; ``session`` imports neither
(the CLI process never imports torch).
"""
