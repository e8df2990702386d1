"""The cluster model: nodes, devices and links (see spec.py for the names)."""

from autodist.resource_spec.spec import DeviceSpec, LinkSpec, NodeSpec, Path, ResourceSpec

__all__ = ["DeviceSpec", "LinkSpec", "NodeSpec", "Path", "ResourceSpec"]
