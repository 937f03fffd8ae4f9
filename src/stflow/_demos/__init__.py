"""The demo's parts (``python -m stflow.demo``).

- ``core``         the problem, kernels and command-line helpers
- ``distributed``  the blocked conjugate gradient over MPI ranks (``--distributed``)

Imports the public package (``stflow``) like any program.
"""
