"""Host batches put on JAX devices at a tenth of ``jax.device_put``'s cost.

``jax.device_put`` of a NumPy array costs 40-130 µs on a CPU whatever its
size (``bench/bench_jax.py``): that is Python dispatch, not copying, and at a
batch of 4096 rows of 16 floats it costs as much as the loader's own batch.
XLA's batched put, the call ``jax.make_array_from_callback`` ends in, costs
about 5 µs. It is not public API, so :class:`Putter` uses it only after
checking it against ``jax.device_put`` on the first array of each shape and
dtype (same shape, dtype, sharding, committedness and values); where that
check fails, or this JAX lacks the call, every array goes through
``jax.device_put``. Either way the device arrays are the same.

Like ``jax.device_put``, a put is asynchronous and, on a CPU device, aliases
host memory that starts on a 64-byte boundary instead of copying it: the
caller must not write an array after putting it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np

from exactbatch.hints import Foreign

if TYPE_CHECKING:
    import jax

__all__ = ["Putter"]

# What jax.device_put is given: a device, a sharding, or None (JAX's default device)
Target: TypeAlias = "jax.Device | jax.sharding.Sharding | None"
# How arrays of one shape and dtype are put: (aval, devices, each device's rows or None)
Plan = tuple[Foreign, list["jax.Device"], list[Any] | None]


def _batched_put() -> tuple[Foreign, Foreign] | None:
    """``(XLA's batched put, JAX's core module)``, or None where this JAX lacks them
    (JAX's private modules: not annotated, read as :data:`~exactbatch.hints.Foreign`)."""
    try:
        core = importlib.import_module("jax._src.core")
        xla_client = importlib.import_module("jax._src.lib").xla_client
        return xla_client.batched_device_put, core
    except (ImportError, AttributeError):  # pragma: no cover - another JAX
        return None


class Putter:
    """Puts NumPy arrays on ``sharding``, as ``jax.device_put(a, target)`` would.

    ``target`` is what ``jax.device_put`` is given (a device, a sharding, or
    None for JAX's default device, which leaves the array uncommitted);
    ``sharding`` is where that puts an array (a ``jax.sharding.Sharding``).
    ``fast=False`` always uses ``jax.device_put``.
    """

    def __init__(
        self, target: Target, sharding: jax.sharding.Sharding, *, fast: bool = True
    ) -> None:
        self.target, self.sharding = target, sharding
        self.committed = target is not None
        # (shape, dtype) -> (aval, devices, indices), or None: device_put
        self.plans: dict[tuple[tuple[int, ...], np.dtype], Plan | None] = {}
        self.batched = _batched_put() if fast else None

    def __call__(self, arrays: tuple[np.ndarray, ...]) -> tuple[jax.Array, ...]:
        """The device arrays of ``arrays`` (C-contiguous NumPy arrays), put asynchronously."""
        out: list[jax.Array] = []
        for a in arrays:
            plan: Plan | Literal[False] | None = self.plans.get((a.shape, a.dtype), False)
            if plan is False:
                plan, put = self._plan(a)
                self.plans[(a.shape, a.dtype)] = plan
            elif plan is None:
                put = _jax_device_put(a, self.target)
            else:
                put = self._fast(plan, a)
            out.append(put)
        return tuple(out)

    def _fast(self, plan: Plan, a: np.ndarray) -> jax.Array:
        aval, devices, indices = plan
        shards = [a] if indices is None else [a[i] for i in indices]
        assert self.batched is not None  # (a plan is made only with it)
        put: jax.Array = self.batched[0](aval, self.sharding, shards, devices, self.committed)
        return put

    def _plan(self, a: np.ndarray) -> tuple[Plan | None, jax.Array]:
        """``(plan, a put by jax.device_put)``: the plan for arrays like ``a``, or None
        where the batched put is missing or does not give what ``jax.device_put`` gives."""
        ref = _jax_device_put(a, self.target)
        if self.batched is None:
            return None, ref
        core = self.batched[1]
        try:
            aval = core.ShapedArray(a.shape, a.dtype)
            if hasattr(core, "update_aval_with_sharding"):  # JAX >= 0.5: avals know shardings
                aval = core.update_aval_with_sharding(aval, self.sharding)
            where = self.sharding.addressable_devices_indices_map(a.shape)
            devices = list(where)
            indices = None if len(devices) == 1 else [where[d] for d in devices]
            plan: Plan = (aval, devices, indices)
            got = self._fast(plan, a)
            same = (
                got.shape == ref.shape
                and got.dtype == ref.dtype
                and got.sharding == ref.sharding
                and getattr(got, "committed", None) == getattr(ref, "committed", None)
                and np.array_equal(np.asarray(got), np.asarray(ref))
            )
        except Exception:  # noqa: BLE001 - not public API: any failure means device_put
            return None, ref
        return (plan if same else None), ref


def _jax_device_put(a: np.ndarray, target: Target) -> jax.Array:
    import jax

    put: jax.Array = jax.device_put(a, target)
    return put
