"""The training step as data (GraphItem) and the ways to capture it."""

from autodist.graph.item import PHASES, GraphItem, JobInfo, OpInfo, VariableInfo

__all__ = ["PHASES", "GraphItem", "JobInfo", "OpInfo", "VariableInfo"]
