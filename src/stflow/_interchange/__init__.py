"""Interchange: user buffers in, views out.

- ``sources``       a user buffer (NumPy, CAI, DLPack producers) as an address, shape,
                    dtype and strides
- ``dlpack``        DLPack capsules, both ways
- ``views``         the stream handles and array views handed to task bodies
                    (``CudaStream``, ``stf_cai``)
- ``device_array``  ``DeviceArray``: memory on a data place, exported through CAI,
                    the array interface and DLPack

Imports ``_core`` (errors, layouts), ``_places`` and the backends. The backend
contract's stream and view types come from ``views``.
"""
