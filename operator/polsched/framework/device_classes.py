"""DeviceClassResolver: which DeviceClass serves an extended resource (DRAExtendedResource).

Since v1.37 (DRAExtendedResource, GA) a container's request for an extended resource may
be served by devices: a DeviceClass names the resource in `spec.extendedResourceName`, and
every class also serves its implicit name `deviceclass.resource.kubernetes.io/<class>`.
NodeResourcesFit then leaves such a resource to DynamicResources on a node that does not
advertise it in `status.allocatable`, and DynamicResources allocates devices for it.

Upstream: fwk.DeviceClassResolver, implemented by k8s.io/dynamic-resource-allocation's
deviceclass/extendedresourcecache.ExtendedResourceCache. When several classes name the
same extended resource, the newest one (creationTimestamp, then the smaller name) serves
it, as updateResourceName2class decides. Here the mapping is rebuilt from the listers'
DeviceClasses whenever their generation changes, instead of kept by event handlers; one
resolver per Listers, shared by the plugins that read it. Purely data: no I/O.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

from polsched.framework import listers as ls
from polsched.framework import names
from polsched.objects import Json

# resourceapi.ResourceDeviceClassPrefix: the implicit extended resource name of a class.
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"


def is_dra_extended_resource_name(name: str) -> bool:
    """schedutil.IsDRAExtendedResourceName: an extended resource name, or a class's
    implicit name (which lives in the kubernetes.io namespace, so is not "extended")."""
    return names.is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


class DeviceClassResolver:
    """GetDeviceClass(resourceName) over one Listers' DeviceClasses."""

    def __init__(self, listers: ls.Listers) -> None:
        self._listers = listers
        self._generation = -1
        self._by_resource: dict[str, Json] = {}

    def _mapping(self) -> Mapping[str, Json]:
        gen = self._listers.generations[ls.DEVICE_CLASS.name]
        if gen == self._generation:
            return self._by_resource
        by_resource: dict[str, Json] = {}
        explicit: dict[str, tuple[str, str, Json]] = {}
        for raw in self._listers.objects[ls.DEVICE_CLASS.name].values():
            meta = raw.get("metadata") or {}
            name = str(meta.get("name") or "")
            if not name:
                continue
            by_resource[DEVICE_CLASS_PREFIX + name] = raw
            ern = (raw.get("spec") or {}).get("extendedResourceName")
            if not isinstance(ern, str) or not ern:
                continue
            # RFC 3339 timestamps in UTC compare as text; the newest wins, then the
            # smaller name (updateResourceName2class).
            created = str(meta.get("creationTimestamp") or "")
            have = explicit.get(ern)
            if have is None or created > have[0] or (created == have[0] and name < have[1]):
                explicit[ern] = (created, name, raw)
        for ern, (_, _, raw) in explicit.items():
            by_resource[ern] = raw
        self._by_resource = by_resource
        self._generation = gen
        return by_resource

    def get_device_class(self, resource_name: str) -> Json | None:
        """The class that serves `resource_name`, or None."""
        return self._mapping().get(resource_name)

    def any_class(self) -> bool:
        return bool(self._listers.objects[ls.DEVICE_CLASS.name])


def scored_by_devices(listers: ls.Listers, names: tuple[str, ...]) -> bool:
    """getDRAPreScoredParams' test: one of a scorer's resources is served by a class."""
    r = resolver_for(listers)
    return r.any_class() and any(
        is_dra_extended_resource_name(n) and r.get_device_class(n) is not None
        for n in names)


_RESOLVERS: weakref.WeakKeyDictionary[ls.Listers, DeviceClassResolver] = \
    weakref.WeakKeyDictionary()


def resolver_for(listers: ls.Listers) -> DeviceClassResolver:
    """The one resolver of a cluster view (the cache's, or an offline loader's)."""
    r = _RESOLVERS.get(listers)
    if r is None:
        r = _RESOLVERS[listers] = DeviceClassResolver(listers)
    return r


__all__ = ["DEVICE_CLASS_PREFIX", "DeviceClassResolver", "is_dra_extended_resource_name",
           "resolver_for", "scored_by_devices"]
