"""Places: where data lives and where tasks run.

Owns the place values (``data_place``, ``exec_place``, ``exec_place_grid``, the
locality-domain, green-context and context places), their numbering and handles,
green contexts (``green_context_helper``, ``green_places``), the partition mappers of
composite data, and the grid work of a task (forks, joins, composite allocations).

Modules, each importing only those above it in this list:

- ``stream_partitions``  StreamPartition: where a partitioned place's streams live
- ``partition``          mapper contract and named mappers (pure)
- ``numbering``          place numbers, handles, extents
- ``locality``           what places ask the default backend: devices, locality
                         domains, the device and partition of a context
- ``green_view``         green_ctx_view: one green context, as the place factories
                         take it
- ``places``             the place classes and their factories
- ``green``              splitting a device into green contexts (the backend's
                         ``split_device``), as places
- ``gridwork``           composite allocations, one stream per grid member

Outside the package it imports ``_core.errors``, ``_core.config``, ``backends`` (the contract
``_base`` and ``default_backend``) and, for types only, ``_core.streams``. Splitting and
contexts are methods of the backend contract: nothing here imports a backend
module or asks which backend it has. Re-exports nothing.
"""
