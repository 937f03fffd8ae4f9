"""``stflow.device_array``: the reference's module path of :class:`DeviceArray`.

``from stflow.device_array import DeviceArray`` works as with
``cuda.stf._experimental.device_array``; the class is the same object as
``stflow.DeviceArray`` (implemented in ``stflow._interchange.device_array``).
"""

from __future__ import annotations

from ._interchange.device_array import DeviceArray

__all__ = ["DeviceArray"]
