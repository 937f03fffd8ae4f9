"""The core: the vocabulary of the runtime and its pure decisions.

Owns what a task's accesses mean and what they decide, without calling a backend:

- ``errors``     the exception hierarchy and the log of asynchronous errors
- ``config``     every setting read from the environment (one table)
- ``access``     access modes (read, write, rw, reduce) and their encoding
- ``reduce``     the reduction operators: identities, ufuncs, mode encoding
- ``layout``     strided layouts of user buffers (extents, byte strides)
- ``deps``       ordering: which completed work an access must wait for
- ``coherence``  where a logical data's bytes are, and which copy is current
- ``streams``    stream pools per execution place, and which stream a task gets
- ``plan``       a task's work planned over data states and streams (cached)

Imports only the backend contract (``backends._base``: events, streams, places of
memory) and two pure leaves of ``_places`` (place numbering, stream partitions).
``errors`` and ``config`` are the foundation every part may import.
"""
