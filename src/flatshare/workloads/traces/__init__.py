"""Loaders for public request traces; each returns a `Workload` or raises `InputError` naming the record."""

from __future__ import annotations

from flatshare.workloads.traces.azure import load_azure
from flatshare.workloads.traces.mooncake import load_mooncake
from flatshare.workloads.traces.options import TraceOptions
from flatshare.workloads.traces.sharegpt import load_sharegpt
from flatshare.workloads.traces.weka import load_weka, weka_sessions

__all__ = ["TraceOptions", "load_azure", "load_mooncake", "load_sharegpt", "load_weka", "weka_sessions"]
